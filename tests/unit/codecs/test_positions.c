/* being written */ int main(void) { return 1; }
