/*
 * An aarch64 starling-agent under qemu-user completes a round against the
 * x86-64 coordinator of this process, on loopback: it enrols (reporting its
 * NEON kernel), checks in, downloads the model, trains, uploads, and the
 * coordinator stores and acknowledges the update exactly once.
 *
 * How to run it:
 *   cmake --preset aarch64 && cmake --build build/aarch64 --target starling-agent
 *   ctest --test-dir build/default -R test_agent_qemu
 * It looks for, in this order (environment first, then the CMake cache
 * variables of the same names, set at configure time):
 *   SL_CROSS_AGENT    the aarch64 starling-agent
 *                     (default <source>/build/aarch64/device/starling-agent)
 *   SL_CROSS_SYSROOT  its sysroot, qemu's -L (default <source>/build/sysroot/arm64,
 *                     made by deploy/make-sysroot.sh arm64)
 *   SL_CROSS_QEMU     the emulator (default qemu-aarch64 on PATH)
 * When the binary, the sysroot or qemu is missing the test prints
 * "skipped: ..." and exits with 77, which ctest reports as skipped
 * (SKIP_RETURN_CODE). A binary that is not an aarch64 ELF is a failure.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../support/sl_test.h"
#include "agent_harness.h"

#define SKIP 77

#ifndef SL_CROSS_AGENT
#define SL_CROSS_AGENT ""
#endif
#ifndef SL_CROSS_SYSROOT
#define SL_CROSS_SYSROOT ""
#endif

static const char *agent_bin, *sysroot, *qemu;

static const char *setting(const char *env, const char *cached, const char *fallback)
{
    const char *v = getenv(env);
    if (v != NULL && v[0] != '\0')
        return v;
    return cached[0] != '\0' ? cached : fallback;
}

/* 1 when @path is an ELF for aarch64 (e_machine 183, little-endian). */
static int is_aarch64_elf(const char *path)
{
    unsigned char h[20];
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(h, 1, sizeof h, f) : 0;
    if (f != NULL)
        fclose(f);
    return n == sizeof h && memcmp(h, "\177ELF", 4) == 0 && h[5] == 1 && h[18] == 183 && h[19] == 0;
}

static pid_t spawn(char *const argv[], const char *log)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvp(argv[0], argv);
        _exit(127);
    }
    return pid;
}

static void test_aarch64_agent_round(void **state)
{
    char dir[512], data_dir[600], agent_dir[600], log[600], task_s[32];
    ag_coord c;
    sl_device_record dev;
    ag_ack *acks;
    uint64_t updates, closed;
    int64_t task;
    int code;
    pid_t pid;
    (void)state;
    sl_test_mkdtemp(dir, sizeof dir, "agent_qemu");
    snprintf(data_dir, sizeof data_dir, "%s/data", dir);
    snprintf(agent_dir, sizeof agent_dir, "%s/agent", dir);
    snprintf(log, sizeof log, "%s/agent.log", dir);
    ag_make_data(data_dir, 200, 20);
    ag_coord_open(&c, dir, NULL, NULL, NULL);
    task = ag_create_task(&c, "mlp",
                          "{\"name\":\"qemu\",\"target\":1,\"quorum\":1,\"over_selection\":1,"
                          "\"selection_window_ms\":200,\"report_deadline_ms\":300000,"
                          "\"values\":\"fp16\",\"density\":0.05,\"local_epochs\":1,"
                          "\"batch\":32,\"local_lr\":0.05}");
    snprintf(task_s, sizeof task_s, "%lld", (long long)task);
    {
        char *argv[] = {(char *)qemu,
                        "-L",
                        (char *)sysroot,
                        (char *)agent_bin,
                        "--coordinator",
                        c.url,
                        "--task",
                        task_s,
                        "--data",
                        data_dir,
                        "--state-dir",
                        agent_dir,
                        "--enrolment-token-file",
                        c.enrol_file,
                        "--retry-base",
                        "100ms",
                        "--max-wait",
                        "2s",
                        "--once",
                        "--log-level",
                        "debug",
                        NULL};
        pid = spawn(argv, log);
    }
    /* emulated training of an mlp epoch on 200 samples: seconds, not minutes */
    code = ag_wait(pid, 300000);
    if (code != 0) {
        void *text = NULL;
        size_t len = 0;
        if (sl_fs_read_file(log, 1 << 20, &text, &len) == SL_OK)
            fprintf(stderr, "%s\n", (char *)text);
        free(text);
        fail_msg("the aarch64 agent ended with %d", code);
    }
    ag_coord_stop_server(&c);
    /* one update, acknowledged to the agent and stored once */
    assert_int_equal(ag_read_acks(agent_dir, &acks), 1);
    assert_int_equal(ag_check_acks(&c, acks, 1), 1);
    ag_count_task(&c, task, &updates, &closed);
    assert_int_equal(updates, 1);
    assert_int_equal(closed, 1);
    assert_int_equal(ag_model_version(&c, task), 2);
    /* it was the aarch64 code that trained: the device enrolled with NEON */
    assert_int_equal(sl_store_get_device(c.store, acks[0].device, &dev), SL_OK);
    fprintf(stderr, "aarch64 device %lld capabilities %s\n", (long long)acks[0].device,
            dev.capabilities);
    assert_non_null(strstr(dev.capabilities, "neon"));
    free(acks);
    ag_coord_close(&c);
    sl_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aarch64_agent_round),
    };
    struct stat st;
    agent_bin = setting("SL_CROSS_AGENT", SL_CROSS_AGENT, "");
    sysroot = setting("SL_CROSS_SYSROOT", SL_CROSS_SYSROOT, "");
    qemu = setting("SL_CROSS_QEMU", "", "qemu-aarch64");
    if (agent_bin[0] == '\0' || stat(agent_bin, &st) != 0) {
        printf("skipped: no aarch64 starling-agent at '%s' (cmake --preset aarch64 && cmake "
               "--build build/aarch64 --target starling-agent, or set SL_CROSS_AGENT)\n",
               agent_bin);
        return SKIP;
    }
    if (sysroot[0] == '\0' || stat(sysroot, &st) != 0 || !S_ISDIR(st.st_mode)) {
        printf("skipped: no aarch64 sysroot at '%s' (deploy/make-sysroot.sh arm64, or set "
               "SL_CROSS_SYSROOT)\n",
               sysroot);
        return SKIP;
    }
    if (!ag_have(qemu)) {
        printf("skipped: %s is not on PATH (Debian qemu-user, or set SL_CROSS_QEMU)\n", qemu);
        return SKIP;
    }
    if (!is_aarch64_elf(agent_bin)) {
        fprintf(stderr, "%s is not an aarch64 ELF executable\n", agent_bin);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
