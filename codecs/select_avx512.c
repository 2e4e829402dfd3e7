/* select_avx512.c - being written (codecs, issue 3). */
