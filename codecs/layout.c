/* layout.c - being written (codecs, issue 3). */
