/* select_neon.c - being written (codecs, issue 3). */
