/* frame.c - being written (codecs, issue 3). */
