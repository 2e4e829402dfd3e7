/*
 * starling/common.h - the project's shared foundation.
 *
 * Status codes, logging, clocks, atomic file writes and configuration.
 * Nothing domain-specific lives here. Every other component depends on
 * this header and on nothing else of the project's below it.
 *
 * Conventions (see STYLE.md): functions return an int status (SL_OK or a
 * negative sl_status); results go through out-parameters, which a failed
 * call leaves untouched. Unless a comment says otherwise a function is
 * thread-safe when its arguments are not shared between threads.
 */
#ifndef STARLING_COMMON_H
#define STARLING_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status codes                                                             */
/* ------------------------------------------------------------------------ */

/*
 * The one list of project statuses: X(NAME, value, message).
 * Values are negative, append-only and never renumbered: a value, once
 * released, keeps its meaning forever (it crosses process boundaries in
 * logs, exit codes and the REST API's problem documents).
 */
#define SL_STATUS_MAP(X)                                            \
    X(ENOMEM, -1, "out of memory")                                  \
    X(EINVAL, -2, "invalid argument")                               \
    X(ERANGE, -3, "value out of range")                             \
    X(EIO, -4, "input/output error")                                \
    X(ENOENT, -5, "no such file or entry")                          \
    X(EEXIST, -6, "already exists")                                 \
    X(ENOSPC, -7, "no space left on device")                        \
    X(ETIMEDOUT, -8, "deadline passed")                             \
    X(EBUSY, -9, "resource busy")                                   \
    X(ECONFIG_KEY, -10, "unknown configuration key")                \
    X(ECONFIG_VALUE, -11, "bad configuration value")                \
    X(ECORRUPT, -12, "data is corrupt")                             \
    X(EMAGIC, -13, "bad magic number")                              \
    X(EVERSION, -14, "unsupported format version")                  \
    X(ETRUNCATED, -15, "input is truncated")                        \
    X(ELAYOUT, -16, "tensor layout mismatch")                       \
    X(ENONFINITE, -17, "value is NaN or infinite")                  \
    X(ETOOBIG, -18, "size exceeds the allowed limit")               \
    X(ECHECKSUM, -19, "checksum mismatch")                          \
    X(EUNSUPPORTED, -20, "operation or mode not supported")         \
    X(ESTATE, -21, "operation not allowed in the current state")    \
    X(EDUPLICATE, -22, "duplicate of an earlier item")              \
    X(ECONFLICT, -23, "conflicts with an earlier item")             \
    X(ECOUNT, -24, "count is inconsistent with the declared sizes") \
    X(ECOMPRESS, -25, "compression library error")                  \
    X(EPERM, -26, "permission denied")                              \
    X(ESYNTAX, -27, "syntax error")                                 \
    X(ESPEC, -28, "invalid model spec")                             \
    X(EFENCED, -29, "a newer leader took over (fencing epoch)")     \
    X(ELIMIT, -30, "a per-client limit is reached")                 \
    X(ESUPPORT, -31, "the positions' split support is missing or differs")

/** Project status codes. SL_OK is zero; every error is negative. */
typedef enum sl_status {
    SL_OK = 0,
#define SL__STATUS_ENUM(name, value, msg) SL_##name = (value),
    SL_STATUS_MAP(SL__STATUS_ENUM)
#undef SL__STATUS_ENUM
} sl_status;

/**
 * sl_strerror - human-readable message for a status.
 * @status: any int; SL_OK gives "ok"; an unknown value gives "unknown status".
 * Returns a static string (never NULL). Thread-safe.
 */
const char *sl_strerror(int status);

/**
 * sl_errname - symbolic name of a status, such as "SL_EINVAL".
 * @status: any int; SL_OK gives "SL_OK"; an unknown value gives "SL_UNKNOWN".
 * Returns a static string (never NULL). Thread-safe.
 */
const char *sl_errname(int status);

/**
 * sl_status_from_errno - map a C errno value to the closest project status.
 * @err: an errno value (ENOMEM, ENOSPC, EEXIST, ...). Unknown values map to SL_EIO.
 */
int sl_status_from_errno(int err);

/* ------------------------------------------------------------------------ */
/* Architecture and CPU features                                            */
/* ------------------------------------------------------------------------ */

/*
 * Compile-time architecture detection, with the SL_NO_SIMD kill switch
 * (-DSL_NO_SIMD=ON builds only the scalar reference kernels).
 *   SL_X86_SIMD  x86-64: AVX2 and AVX-512 variants are built and picked at
 *                run time by sl_cpu_features().
 *   SL_NEON      aarch64, or armv7 built with -mfpu=neon: NEON variants are
 *                chosen at compile time.
 */
#if !defined(SL_NO_SIMD) && (defined(__x86_64__) || defined(_M_X64))
#define SL_X86_SIMD 1
#endif
#if !defined(SL_NO_SIMD) && (defined(__aarch64__) || defined(__ARM_NEON))
#define SL_NEON 1
#endif

/** CPU feature bits reported by sl_cpu_features(). */
#define SL_CPU_AVX2   0x1u /* AVX2 + FMA + BMI2 + F16C, with OS support for YMM state */
#define SL_CPU_AVX512 0x2u /* AVX-512 F/BW/DQ/VL, with OS support for ZMM state */
#define SL_CPU_NEON   0x4u /* built for NEON (compile-time) */

/**
 * sl_cpu_features - the SIMD features this process may use, detected once
 * (CPUID and XGETBV on x86). Returns 0 when built with SL_NO_SIMD or when the
 * environment variable SL_FORCE_SCALAR is set to 1, so every caller falls
 * back to its scalar reference. Thread-safe.
 */
unsigned sl_cpu_features(void);

/**
 * sl_cpu_describe - the variant name for a feature mask: "avx512", "avx2",
 * "neon" or "scalar" (the best one present). Static string.
 */
const char *sl_cpu_describe(unsigned features);

/* ------------------------------------------------------------------------ */
/* Clocks                                                                   */
/* ------------------------------------------------------------------------ */

/**
 * An injectable clock. Production code takes a `const sl_clock *` and never
 * calls clock_gettime() itself, so tests can drive time by hand.
 * @monotonic_ns: nanoseconds on a clock that never goes backwards.
 * @wall_ns: nanoseconds since the Unix epoch (UTC).
 * @ctx: passed to both callbacks.
 */
typedef struct sl_clock {
    int64_t (*monotonic_ns)(void *ctx);
    int64_t (*wall_ns)(void *ctx);
    void *ctx;
} sl_clock;

/** sl_clock_system - the process-wide real clock (CLOCK_MONOTONIC, CLOCK_REALTIME). */
const sl_clock *sl_clock_system(void);

/** sl_clock_monotonic_ns - read @clock's monotonic time; NULL means the system clock. */
int64_t sl_clock_monotonic_ns(const sl_clock *clock);

/** sl_clock_wall_ns - read @clock's wall time; NULL means the system clock. */
int64_t sl_clock_wall_ns(const sl_clock *clock);

/**
 * A manual clock for tests: time moves only when the test moves it.
 * Initialise with sl_clock_manual_init(); use `&m.clock` wherever a
 * `const sl_clock *` is taken. Not thread-safe.
 */
typedef struct sl_clock_manual {
    sl_clock clock;
    int64_t monotonic_ns;
    int64_t wall_ns;
} sl_clock_manual;

/**
 * sl_clock_manual_init - set up @m with the given starting times (ns).
 */
void sl_clock_manual_init(sl_clock_manual *m, int64_t monotonic_ns, int64_t wall_ns);

/**
 * sl_clock_manual_advance - move both times of @m forward by @delta_ns (>= 0).
 * Returns SL_OK, or SL_EINVAL for a negative delta (time never goes back).
 */
int sl_clock_manual_advance(sl_clock_manual *m, int64_t delta_ns);

/**
 * sl_clock_format_utc - format a wall time as RFC 3339 UTC with milliseconds,
 * such as "2026-11-30T01:23:40.123Z".
 * @wall_ns: nanoseconds since the epoch.
 * @out, @cap: destination buffer; at least 25 bytes.
 * Returns SL_OK or SL_EINVAL (buffer too small; @out untouched).
 */
int sl_clock_format_utc(int64_t wall_ns, char *out, size_t cap);

/* ------------------------------------------------------------------------ */
/* Logging                                                                  */
/* ------------------------------------------------------------------------ */

/** Log levels, most severe first. */
typedef enum sl_log_level {
    SL_LOG_ERROR = 0,
    SL_LOG_WARN = 1,
    SL_LOG_INFO = 2,
    SL_LOG_DEBUG = 3,
    SL_LOG_TRACE = 4
} sl_log_level;

/**
 * A log sink receives one complete logfmt line, without the trailing
 * newline, for example:
 *   ts=2026-11-30T01:23:40.123Z level=info component=store msg="opened db"
 * @level: the record's level; @line: NUL-terminated, valid only during the
 * call; @userdata: as given to sl_log_set_sink().
 */
typedef void (*sl_log_sink)(sl_log_level level, const char *line, void *userdata);

/**
 * sl_log_set_sink - choose where log lines go. The library never prints by
 * itself: until a program sets a sink, every record is dropped.
 * @sink: NULL to drop everything. @userdata: handed to the sink.
 * Call it before starting threads; records emitted concurrently with this
 * call may go to the old sink.
 */
void sl_log_set_sink(sl_log_sink sink, void *userdata);

/** sl_log_set_level - records above @level (less severe) are dropped. Default INFO. */
void sl_log_set_level(sl_log_level level);

/** sl_log_get_level - the current threshold. */
sl_log_level sl_log_get_level(void);

/**
 * sl_log_set_clock - clock used for the `ts=` field (NULL: system clock).
 * The clock must outlive all logging.
 */
void sl_log_set_clock(const sl_clock *clock);

/**
 * sl_log_parse_level - parse "error", "warn", "info", "debug" or "trace".
 * Returns SL_OK and sets *@out, or SL_ECONFIG_VALUE.
 */
int sl_log_parse_level(const char *text, sl_log_level *out);

/** sl_log_level_name - "error", "warn", ... for a level. */
const char *sl_log_level_name(sl_log_level level);

/**
 * sl_log - format one record and hand it to the sink.
 * @component: short name of the emitting component ("store", "codec").
 * @fmt: printf format for the message. Quotes, backslashes and control
 * characters in the message are escaped so a line is always one logfmt line;
 * messages longer than 1 KiB are cut. Thread-safe; the sink may be called
 * from several threads at once.
 */
void sl_log(sl_log_level level, const char *component, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/** sl_logv - as sl_log() with a va_list. */
void sl_logv(sl_log_level level, const char *component, const char *fmt, va_list ap);

/** sl_log_sink_stderr - a ready-made sink that writes each line and '\n' to stderr. */
void sl_log_sink_stderr(sl_log_level level, const char *line, void *userdata);

/* ------------------------------------------------------------------------ */
/* Files                                                                    */
/* ------------------------------------------------------------------------ */

/**
 * sl_fs_write_atomic - replace @path with @len bytes of @data so that at any
 * instant (a crash, kill -9, power loss) the path holds either its old
 * content or the complete new content, never a mix: writes a temporary file
 * in the same directory, fsyncs it, renames it over @path and fsyncs the
 * directory.
 * @mode: permission bits for the new file (for example 0600 for keys).
 * Returns SL_OK, SL_ENOSPC, SL_EPERM, SL_ENOENT (directory missing) or SL_EIO.
 * On failure @path is unchanged and the temporary file removed. Blocks on
 * disk I/O.
 */
int sl_fs_write_atomic(const char *path, const void *data, size_t len, unsigned mode);

/**
 * sl_fs_read_file - read a whole file into a new buffer.
 * @max_len: refuse files larger than this (SL_ETOOBIG) before allocating.
 * @out: receives a malloc'd buffer the caller frees; one NUL byte is
 * appended after the content (not counted in *@out_len) so text can be
 * used as a string.
 * Returns SL_OK, SL_ENOENT, SL_ETOOBIG, SL_ENOMEM or SL_EIO.
 */
int sl_fs_read_file(const char *path, size_t max_len, void **out, size_t *out_len);

/**
 * sl_fs_read_secret - read a small secret file (a token, at most 4 KiB) as a
 * string without surrounding whitespace. @out receives a malloc'd string.
 * Returns SL_OK, an sl_fs_read_file() error, or SL_EINVAL when the content
 * is empty or holds a NUL byte.
 */
int sl_fs_read_secret(const char *path, char **out);

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */

/** Types of configuration values. */
typedef enum sl_config_type {
    SL_CONFIG_STRING,
    SL_CONFIG_INT,     /* int64 in [min, max] */
    SL_CONFIG_DOUBLE,  /* finite double in [min, max] */
    SL_CONFIG_BOOL,    /* true/false, yes/no, on/off, 1/0 */
    SL_CONFIG_SIZE,    /* bytes, with an optional K, M, G suffix (powers of 1024) */
    SL_CONFIG_DURATION /* milliseconds; suffix ms, s, m or h (no suffix: ms) */
} sl_config_type;

/**
 * One declared key. Keys are lower case with underscores ("data_dir"); on
 * the command line they are spelled --data-dir or --data_dir, in the
 * environment PREFIX + upper case (STARLING_DATA_DIR).
 * @default_value: text parsed like any other value, or NULL for no default.
 * @min, @max: inclusive bounds for INT, DOUBLE, SIZE and DURATION (ignored
 * when min > max).
 * @help: one line for --help output.
 */
typedef struct sl_config_spec {
    const char *key;
    sl_config_type type;
    const char *default_value;
    double min;
    double max;
    const char *help;
} sl_config_spec;

/** An opaque set of configuration values checked against a spec. */
typedef struct sl_config sl_config;

/**
 * sl_config_create - a configuration for the @n keys in @specs, holding
 * their defaults. @specs must outlive the configuration.
 * Returns SL_OK, SL_ENOMEM, or SL_ECONFIG_VALUE when a default does not
 * parse (a programming error; sl_config_error() is not available then).
 */
int sl_config_create(const sl_config_spec *specs, size_t n, sl_config **out);

/** sl_config_free - release @cfg; NULL is a no-op. */
void sl_config_free(sl_config *cfg);

/**
 * sl_config_set - set @key from its text form, as every loader does.
 * @origin: where the value came from, for error messages ("file.conf:3").
 * Returns SL_OK; SL_ECONFIG_KEY for an undeclared key; SL_ECONFIG_VALUE when
 * the text does not parse or is out of range. On error the old value is
 * kept and sl_config_error() says what was wrong and where.
 */
int sl_config_set(sl_config *cfg, const char *key, const char *value, const char *origin);

/**
 * sl_config_load_text - parse `key = value` lines; '#' starts a comment
 * line; blank lines are ignored; values may be double-quoted.
 * @name: shown in errors ("agent.conf"). Stops at the first error; values
 * set by earlier lines stay set.
 */
int sl_config_load_text(sl_config *cfg, const char *text, size_t len, const char *name);

/** sl_config_load_file - read @path (at most 1 MiB) and sl_config_load_text() it. */
int sl_config_load_file(sl_config *cfg, const char *path);

/** Flags for sl_config_load_env(). */
#define SL_CONFIG_ENV_STRICT 1u /* an unknown PREFIX* variable is an error */

/**
 * sl_config_load_env - apply variables named @prefix + KEY from @envp (a
 * NULL-terminated "NAME=value" array such as environ).
 * Without SL_CONFIG_ENV_STRICT, unknown variables with the prefix are skipped.
 */
int sl_config_load_env(sl_config *cfg, const char *prefix, char *const *envp, unsigned flags);

/**
 * sl_config_load_args - apply command-line options: --key=value,
 * --key value, --flag (boolean true), --no-flag (boolean false). Parsing stops
 * at "--" or at the first argument not starting with "--".
 * @argv[0] is the program name and is skipped.
 * @first_positional: receives the index of the first argument not consumed
 * (argc when all were); may be NULL.
 */
int sl_config_load_args(sl_config *cfg, int argc, char *const *argv, int *first_positional);

/** sl_config_get_string - the value of a STRING key (NULL when unset). */
int sl_config_get_string(const sl_config *cfg, const char *key, const char **out);

/** sl_config_get_int - the value of an INT key. SL_ENOENT when unset. */
int sl_config_get_int(const sl_config *cfg, const char *key, int64_t *out);

/** sl_config_get_double - the value of a DOUBLE key. SL_ENOENT when unset. */
int sl_config_get_double(const sl_config *cfg, const char *key, double *out);

/** sl_config_get_bool - the value of a BOOL key. SL_ENOENT when unset. */
int sl_config_get_bool(const sl_config *cfg, const char *key, int *out);

/** sl_config_get_size - the value of a SIZE key in bytes. SL_ENOENT when unset. */
int sl_config_get_size(const sl_config *cfg, const char *key, uint64_t *out);

/** sl_config_get_duration_ms - the value of a DURATION key. SL_ENOENT when unset. */
int sl_config_get_duration_ms(const sl_config *cfg, const char *key, int64_t *out);

/*
 * Getters return SL_ECONFIG_KEY for an undeclared key and SL_EINVAL when the
 * key's declared type differs from the getter's. Strings returned stay valid
 * until the key is set again or the configuration is freed.
 */

/**
 * sl_config_error - the message of the last failed set/load, such as
 * "agent.conf:3: epochs: 0 is below the minimum 1". Empty when none.
 */
const char *sl_config_error(const sl_config *cfg);

/**
 * sl_config_usage - write one line per key ("--key <type>  help (default)")
 * into @out (NUL-terminated, cut to @cap). Returns the length it needed.
 */
size_t sl_config_usage(const sl_config *cfg, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* STARLING_COMMON_H */
