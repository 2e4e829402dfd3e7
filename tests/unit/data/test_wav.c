/*
 * The WAV reader: 16-bit and 8-bit PCM, WAVE_FORMAT_EXTENSIBLE, unknown
 * chunks (odd sizes and their pad byte) before and after the samples, a clip
 * cut to @max, the stream placeholders of espeak-ng and FFmpeg; each refusal
 * with its status and message (another rate, stereo, float, 24-bit, cut
 * short in the header, a chunk or the samples, not RIFF, RIFX, no fmt or
 * data chunk, an empty file, a bad block size); and espeak-ng's own files,
 * written by `espeak-ng -w` and `espeak-ng --stdout`. The other files are
 * written here byte by byte.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include "../../support/sl_test.h"
#include "starling/wav.h"

static char g_dir[512];

/* A file being built: bytes appended, the RIFF size filled in by wav_write(). */
typedef struct wav_bytes {
    unsigned char b[4096];
    size_t len;
} wav_bytes;

static void put(wav_bytes *w, const void *p, size_t n)
{
    assert_true(w->len + n <= sizeof w->b);
    memcpy(w->b + w->len, p, n);
    w->len += n;
}

static void put16(wav_bytes *w, unsigned v)
{
    unsigned char b[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    put(w, b, 2);
}

static void put32(wav_bytes *w, uint32_t v)
{
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    put(w, b, 4);
}

static void riff(wav_bytes *w)
{
    w->len = 0;
    put(w, "RIFF", 4);
    put32(w, 0);
    put(w, "WAVE", 4);
}

/* A chunk, with its pad byte after an odd size. */
static void chunk(wav_bytes *w, const char *id, const void *data, size_t n)
{
    put(w, id, 4);
    put32(w, (uint32_t)n);
    put(w, data, n);
    if (n & 1)
        put(w, "", 1);
}

static void fmt(wav_bytes *w, unsigned tag, unsigned channels, unsigned rate, unsigned bits)
{
    unsigned block = channels * bits / 8;
    put(w, "fmt ", 4);
    put32(w, 16);
    put16(w, tag);
    put16(w, channels);
    put32(w, rate);
    put32(w, rate * block);
    put16(w, block);
    put16(w, bits);
}

/* WAVE_FORMAT_EXTENSIBLE with the sub-format @code (1 PCM, 3 float). */
static void fmt_ext(wav_bytes *w, unsigned code, unsigned channels, unsigned rate, unsigned bits)
{
    static const unsigned char tail[14] = {0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80,
                                           0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71};
    unsigned block = channels * bits / 8;
    put(w, "fmt ", 4);
    put32(w, 40);
    put16(w, 0xfffe);
    put16(w, channels);
    put32(w, rate);
    put32(w, rate * block);
    put16(w, block);
    put16(w, bits);
    put16(w, 22);
    put16(w, bits);
    put32(w, 4); /* front centre */
    put16(w, code);
    put(w, tail, sizeof tail);
}

static void pcm16(wav_bytes *w, const short *s, size_t n)
{
    put(w, "data", 4);
    put32(w, (uint32_t)(2 * n));
    for (size_t i = 0; i < n; i++)
        put16(w, (unsigned short)s[i]);
}

static void wav_write(wav_bytes *w, const char *name, size_t len, char *path, size_t cap)
{
    FILE *f;
    uint32_t riff_size = (uint32_t)(w->len - 8);
    for (int i = 0; i < 4; i++)
        w->b[4 + i] = (unsigned char)(riff_size >> (8 * i));
    snprintf(path, cap, "%s/%s", g_dir, name);
    f = fopen(path, "wb");
    assert_non_null(f);
    if (len)
        assert_int_equal(fwrite(w->b, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

static const short g_samples[6] = {0, 1, -1, 32767, -32768, 16384};

static void test_pcm(void **state)
{
    static const unsigned char u8[4] = {0, 128, 255, 64};
    wav_bytes w;
    char path[700], err[256];
    float out[16];
    size_t n = 99;
    (void)state;
    /* chunks before and after, odd sizes padded */
    riff(&w);
    chunk(&w, "LIST", "INFOx", 5);
    fmt(&w, 1, 1, 16000, 16);
    chunk(&w, "fact", "\x06\x00\x00\x00", 4);
    pcm16(&w, g_samples, 6);
    chunk(&w, "LIST", "abc", 3);
    wav_write(&w, "pcm16.wav", w.len, path, sizeof path);
    assert_int_equal(sl_wav_load(path, 16000, out, 16, &n, err, sizeof err), SL_OK);
    assert_int_equal(n, 6);
    for (int i = 0; i < 6; i++)
        assert_true(out[i] == (float)g_samples[i] / 32768.0f);
    assert_true(out[3] < 1.0f && out[4] == -1.0f && out[5] == 0.5f);
    /* cut to @max, and nothing at all */
    memset(out, 0, sizeof out);
    assert_int_equal(sl_wav_load(path, 16000, out, 4, &n, err, sizeof err), SL_OK);
    assert_int_equal(n, 4);
    assert_true(out[3] == 32767.0f / 32768.0f && out[4] == 0.0f);
    assert_int_equal(sl_wav_load(path, 16000, NULL, 0, &n, err, sizeof err), SL_OK);
    assert_int_equal(n, 0);

    /* 8-bit unsigned */
    riff(&w);
    fmt(&w, 1, 1, 8000, 8);
    chunk(&w, "data", u8, 4);
    wav_write(&w, "u8.wav", w.len, path, sizeof path);
    assert_int_equal(sl_wav_load(path, 8000, out, 16, &n, err, sizeof err), SL_OK);
    assert_int_equal(n, 4);
    assert_true(out[0] == -1.0f && out[1] == 0.0f && out[2] == 127.0f / 128.0f && out[3] == -0.5f);

    /* WAVE_FORMAT_EXTENSIBLE, PCM */
    riff(&w);
    fmt_ext(&w, 1, 1, 16000, 16);
    pcm16(&w, g_samples, 6);
    wav_write(&w, "ext.wav", w.len, path, sizeof path);
    assert_int_equal(sl_wav_load(path, 16000, out, 16, &n, err, sizeof err), SL_OK);
    assert_int_equal(n, 6);
    assert_true(out[5] == 0.5f);

    /* an empty data chunk */
    riff(&w);
    fmt(&w, 1, 1, 16000, 16);
    chunk(&w, "data", "", 0);
    wav_write(&w, "silent.wav", w.len, path, sizeof path);
    assert_int_equal(sl_wav_load(path, 16000, out, 16, &n, err, sizeof err), SL_OK);
    assert_int_equal(n, 0);
}

static void test_stream_sizes(void **state)
{
    wav_bytes w;
    char path[700], err[256];
    float out[16];
    size_t n = 0;
    (void)state;
    /* espeak-ng --stdout: RIFF 0x7FFFF024, data 0x7FFFF000, the samples to the end */
    riff(&w);
    fmt(&w, 1, 1, 16000, 16);
    put(&w, "data", 4);
    put32(&w, 0x7ffff000u);
    for (int i = 0; i < 6; i++)
        put16(&w, (unsigned short)g_samples[i]);
    wav_write(&w, "espeak_stream.wav", w.len, path, sizeof path);
    assert_int_equal(sl_wav_load(path, 16000, out, 16, &n, err, sizeof err), SL_OK);
    assert_int_equal(n, 6);
    assert_true(out[5] == 0.5f);
    /* FFmpeg's 0xFFFFFFFF, cut in the middle of a sample: whole samples only */
    riff(&w);
    fmt(&w, 1, 1, 16000, 16);
    put(&w, "data", 4);
    put32(&w, 0xffffffffu);
    for (int i = 0; i < 6; i++)
        put16(&w, (unsigned short)g_samples[i]);
    wav_write(&w, "ffmpeg_stream.wav", w.len - 1, path, sizeof path);
    assert_int_equal(sl_wav_load(path, 16000, out, 16, &n, err, sizeof err), SL_OK);
    assert_int_equal(n, 5);
    assert_true(out[4] == -1.0f);
    /* any other size beyond the end is a file cut short */
    riff(&w);
    fmt(&w, 1, 1, 16000, 16);
    put(&w, "data", 4);
    put32(&w, 0x10000000u);
    put32(&w, 0);
    wav_write(&w, "big_data.wav", w.len, path, sizeof path);
    n = 77;
    assert_int_equal(sl_wav_load(path, 16000, out, 16, &n, err, sizeof err), SL_ETRUNCATED);
    assert_int_equal(n, 77);
    assert_non_null(strstr(err, "the data chunk says 268435456 bytes, the file has 4"));
}

/* @w written as @name (its first @len bytes) must be refused with @status and @words. */
static void expect_refused(wav_bytes *w, const char *name, size_t len, unsigned rate, int status,
                           const char *words)
{
    char path[700], err[256] = "";
    float out[8];
    size_t n = 77;
    int rc;
    for (int i = 0; i < 8; i++)
        out[i] = -7.0f;
    wav_write(w, name, len, path, sizeof path);
    rc = sl_wav_load(path, rate, out, 8, &n, err, sizeof err);
    if (rc != status)
        fail_msg("%s: %s, not %s (%s)", name, sl_errname(rc), sl_errname(status), err);
    assert_int_equal(n, 77);
    for (int i = 0; i < 8; i++)
        assert_true(out[i] == -7.0f);
    if (strstr(err, words) == NULL || strstr(err, name) == NULL)
        fail_msg("%s: \"%s\" does not say \"%s\"", name, err, words);
}

static void test_refusals(void **state)
{
    wav_bytes w;
    char path[700], err[256];
    size_t n;
    (void)state;
    riff(&w);
    fmt(&w, 1, 1, 22050, 16);
    pcm16(&w, g_samples, 6);
    expect_refused(&w, "rate.wav", w.len, 16000, SL_EUNSUPPORTED,
                   "16-bit PCM, mono, 22050 Hz; the task wants 16000 Hz");
    riff(&w);
    fmt(&w, 1, 2, 16000, 16);
    pcm16(&w, g_samples, 6);
    expect_refused(&w, "stereo.wav", w.len, 16000, SL_EUNSUPPORTED,
                   "16-bit PCM, 2 channels, 16000 Hz; the task wants mono");
    riff(&w);
    fmt(&w, 3, 1, 16000, 32);
    pcm16(&w, g_samples, 6);
    expect_refused(&w, "float.wav", w.len, 16000, SL_EUNSUPPORTED,
                   "32-bit float, mono, 16000 Hz; the task wants 16-bit PCM");
    riff(&w);
    fmt_ext(&w, 3, 1, 16000, 32);
    pcm16(&w, g_samples, 6);
    expect_refused(&w, "ext_float.wav", w.len, 16000, SL_EUNSUPPORTED, "32-bit float");
    riff(&w);
    fmt(&w, 1, 2, 44100, 24);
    pcm16(&w, g_samples, 6);
    expect_refused(&w, "all_wrong.wav", w.len, 16000, SL_EUNSUPPORTED,
                   "24-bit PCM, 2 channels, 44100 Hz; the task wants 16-bit PCM, mono, 16000 Hz");

    /* cut short: in the RIFF header, a chunk header, the fmt chunk, the samples */
    riff(&w);
    fmt(&w, 1, 1, 16000, 16);
    pcm16(&w, g_samples, 6);
    expect_refused(&w, "cut_riff.wav", 6, 16000, SL_ETRUNCATED, "cut short in the RIFF header");
    expect_refused(&w, "cut_chunk.wav", 16, 16000, SL_ETRUNCATED, "cut short in a chunk header");
    expect_refused(&w, "cut_fmt.wav", 30, 16000, SL_ETRUNCATED, "a 'fmt ' chunk of 16 bytes");
    expect_refused(&w, "cut_data.wav", w.len - 3, 16000, SL_ETRUNCATED,
                   "the data chunk says 12 bytes, the file has 9");
    /* an odd number of bytes of 16-bit samples; a block size that is not one sample */
    riff(&w);
    fmt(&w, 1, 1, 16000, 16);
    chunk(&w, "data", "\x01\x02\x03", 3);
    expect_refused(&w, "odd.wav", w.len, 16000, SL_ECORRUPT,
                   "a data chunk of 3 bytes is not a whole number of 2-byte samples");
    riff(&w);
    fmt(&w, 1, 1, 16000, 16);
    w.b[12 + 8 + 12] = 4; /* block align */
    pcm16(&w, g_samples, 6);
    expect_refused(&w, "block.wav", w.len, 16000, SL_ECORRUPT, "block align of 4 bytes");
    /* missing chunks */
    riff(&w);
    fmt(&w, 1, 1, 16000, 16);
    chunk(&w, "LIST", "abcd", 4);
    expect_refused(&w, "no_data.wav", w.len, 16000, SL_ECORRUPT, "no data chunk");
    riff(&w);
    pcm16(&w, g_samples, 6);
    expect_refused(&w, "no_fmt.wav", w.len, 16000, SL_ECORRUPT, "no fmt chunk");
    /* not WAV */
    w.len = 0;
    put(&w, "label,x\n1,2\n", 12);
    expect_refused(&w, "text.wav", w.len, 16000, SL_EMAGIC, "not a WAV file");
    riff(&w);
    memcpy(w.b, "RIFX", 4);
    expect_refused(&w, "rifx.wav", w.len, 16000, SL_EUNSUPPORTED, "RIFX");
    riff(&w);
    memcpy(w.b + 8, "AVI ", 4);
    expect_refused(&w, "avi.wav", w.len, 16000, SL_EMAGIC, "not a WAV file");
    expect_refused(&w, "empty.wav", 0, 16000, SL_EMAGIC, "empty");
    snprintf(path, sizeof path, "%s/missing.wav", g_dir);
    assert_int_equal(sl_wav_load(path, 16000, NULL, 0, &n, err, sizeof err), SL_ENOENT);
    assert_int_equal(sl_wav_load(g_dir, 16000, NULL, 0, &n, err, sizeof err), SL_EIO);
    /* arguments */
    snprintf(path, sizeof path, "%s/rate.wav", g_dir);
    assert_int_equal(sl_wav_load(path, 0, NULL, 0, &n, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_wav_load(path, 22050, NULL, 4, &n, err, sizeof err), SL_EINVAL);
    assert_int_equal(sl_wav_load(path, 22050, NULL, 0, NULL, err, sizeof err), SL_EINVAL);
}

/* The directory of PATH holding an executable @name into @out; 0 when there is none. */
static int on_path(const char *name, char *out, size_t cap)
{
    const char *p = getenv("PATH");
    while (p != NULL && *p != '\0') {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        snprintf(out, cap, "%.*s/%s", (int)len, p, name);
        if (len > 0 && access(out, X_OK) == 0)
            return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* Run espeak-ng with @argv, its standard output into @stdout_path (may be NULL). */
static void run_espeak(char *const argv[], const char *stdout_path)
{
    int status;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (stdout_path != NULL) {
            int fd = open(stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0 || dup2(fd, 1) < 0)
                _exit(126);
        }
        execv(argv[0], argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_espeak(void **state)
{
    char exe[4096], file[700], streamed[700], err[256] = "";
    static float a[22050 * 4], b[22050 * 4];
    size_t na = 0, nb = 0;
    (void)state;
    if (!on_path("espeak-ng", exe, sizeof exe)) {
        fprintf(stderr, "espeak-ng is not on PATH\n");
        skip();
    }
    snprintf(file, sizeof file, "%s/espeak.wav", g_dir);
    snprintf(streamed, sizeof streamed, "%s/espeak_stdout.wav", g_dir);
    {
        char *argv[] = {exe, "-w", file, "seven", NULL};
        run_espeak(argv, NULL);
    }
    {
        char *argv[] = {exe, "--stdout", "seven", NULL};
        run_espeak(argv, streamed);
    }
    /* its true rate in the refusal */
    assert_int_equal(sl_wav_load(file, 16000, a, 22050 * 4, &na, err, sizeof err), SL_EUNSUPPORTED);
    if (strstr(err, "22050 Hz; the task wants 16000 Hz") == NULL || strstr(err, file) == NULL)
        fail_msg("espeak-ng's file: \"%s\"", err);
    assert_int_equal(na, 0);
    /* at its rate: read, from the file and from the stream (placeholder sizes) alike */
    assert_int_equal(sl_wav_load(file, 22050, a, 22050 * 4, &na, err, sizeof err), SL_OK);
    assert_int_equal(sl_wav_load(streamed, 22050, b, 22050 * 4, &nb, err, sizeof err), SL_OK);
    assert_true(na > 22050 / 10 && na < 22050 * 4);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    {
        float peak = 0;
        for (size_t i = 0; i < na; i++)
            peak = a[i] > peak ? a[i] : -a[i] > peak ? -a[i] : peak;
        assert_true(peak > 0.05f && peak < 1.0f); /* speech, not silence */
    }
}

static int setup(void **state)
{
    (void)state;
    sl_test_mkdtemp(g_dir, sizeof g_dir, "test_wav");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sl_test_rmtree(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pcm),
        cmocka_unit_test(test_stream_sizes),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_espeak),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
