/* values_avx2.c - being written (codecs, issue 3). */
