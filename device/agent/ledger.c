/*
 * ledger.c - the agent's books: the counters file and acks.log (above
 * state.c, whose files and "key=value" text they are written in).
 *
 * acks.log is append-only: one line per acknowledged update,
 *   gen=<G> round=<R> update=<U> device=<D> sha256=<hex> dup=<0|1>
 * written with O_APPEND and fsync'd (then the directory). An append is
 * redone after a kill only when the residual says generation G was
 * accepted and no line of G exists; a line cut short by a kill is removed
 * at start-up (sl__agent_repair_log), so every line is whole.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_int.h"

#define TEXT_MAX 65536

/* ---- counters ------------------------------------------------------------------------ */

int sl__agent_save_counters(const sl_agent *a)
{
    const sl__agent_counters *c = &a->counters;
    char text[1024];
    snprintf(text, sizeof text,
             "participations=%" PRIu64 "\naccepted=%" PRIu64 "\nduplicates=%" PRIu64
             "\nfolded=%" PRIu64 "\ndiscarded=%" PRIu64 "\ndropped=%" PRIu64 "\nnext_gen=%" PRIu64
             "\nresolved_gen=%" PRIu64 "\nlast_round=%" PRId64
             "\nbw_ewma=%.17g\nbpnz_ewma=%.17g\nstep_ms_ewma=%.17g\nsteps_trained=%" PRIu64
             "\ndown_bw_ewma=%.17g\n",
             c->participations, c->accepted, c->duplicates, c->folded, c->discarded, c->dropped,
             c->next_gen, c->resolved_gen, c->last_round, c->bw_ewma, c->bpnz_ewma, c->step_ms_ewma,
             c->steps_trained, c->down_bw_ewma);
    return sl__agent_write_text(a, "counters", text);
}

int sl__agent_load_counters(sl_agent *a)
{
    sl__agent_counters c;
    void *text;
    size_t len;
    int rc = sl__agent_read_file(a, "counters", TEXT_MAX, &text, &len);
    memset(&c, 0, sizeof c);
    c.next_gen = 1;
    if (rc == SL_OK) {
        /* absent keys keep their zero: older files stay readable */
        sl__agent_kv_u64(text, "participations", &c.participations);
        sl__agent_kv_u64(text, "accepted", &c.accepted);
        sl__agent_kv_u64(text, "duplicates", &c.duplicates);
        sl__agent_kv_u64(text, "folded", &c.folded);
        sl__agent_kv_u64(text, "discarded", &c.discarded);
        sl__agent_kv_u64(text, "dropped", &c.dropped);
        sl__agent_kv_u64(text, "next_gen", &c.next_gen);
        sl__agent_kv_u64(text, "resolved_gen", &c.resolved_gen);
        sl__agent_kv_i64(text, "last_round", &c.last_round);
        sl__agent_kv_f64(text, "bw_ewma", &c.bw_ewma);
        sl__agent_kv_f64(text, "bpnz_ewma", &c.bpnz_ewma);
        sl__agent_kv_f64(text, "step_ms_ewma", &c.step_ms_ewma);
        sl__agent_kv_u64(text, "steps_trained", &c.steps_trained);
        sl__agent_kv_f64(text, "down_bw_ewma", &c.down_bw_ewma);
        free(text);
    } else if (rc != SL_ENOENT) {
        return rc;
    }
    if (c.next_gen == 0)
        c.next_gen = 1;
    a->counters = c;
    return SL_OK;
}

/* ---- acks.log ------------------------------------------------------------------------- */

int sl__agent_ack_logged(const sl_agent *a, uint64_t gen, int *found)
{
    char needle[48];
    void *text;
    size_t len;
    int rc = sl__agent_read_file(a, "acks.log", SL__AGENT_MAX_MODEL, &text, &len);
    *found = 0;
    if (rc == SL_ENOENT)
        return SL_OK;
    if (rc != SL_OK)
        return rc;
    snprintf(needle, sizeof needle, "gen=%" PRIu64 " ", gen);
    for (const char *line = text; line != NULL && *line != '\0';) {
        if (strncmp(line, needle, strlen(needle)) == 0) {
            *found = 1;
            break;
        }
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    free(text);
    return SL_OK;
}

int sl__agent_ack_append(const sl_agent *a, const sl__agent_resolved *tag)
{
    char path[SL__AGENT_PATH_MAX], line[256], hex[65];
    int fd, n, rc = SL_OK;
    sl_hex(tag->frame_sha, 32, hex);
    n = snprintf(line, sizeof line,
                 "gen=%" PRIu64 " round=%" PRId64 " update=%" PRId64 " device=%" PRId64
                 " sha256=%s dup=%d\n",
                 tag->gen, tag->round_id, tag->update_id, a->device_id, hex, tag->duplicate);
    if (sl__agent_path(a, "acks.log", path, sizeof path) != SL_OK)
        return SL_ETOOBIG;
    fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return sl_status_from_errno(errno);
    if (write(fd, line, (size_t)n) != n || fsync(fd) != 0)
        rc = SL_EIO;
    close(fd);
    if (rc == SL_OK)
        sl__agent_sync_dir(a, ".");
    return rc;
}

/* A kill inside an append leaves a line without its newline: cut it off
 * (the recovery appends it again when the residual says so). */
int sl__agent_repair_log(const sl_agent *a)
{
    char path[SL__AGENT_PATH_MAX];
    void *text;
    size_t len, keep;
    int rc = sl__agent_read_file(a, "acks.log", SL__AGENT_MAX_MODEL, &text, &len);
    if (rc == SL_ENOENT)
        return SL_OK;
    if (rc != SL_OK)
        return rc;
    keep = len;
    while (keep > 0 && ((char *)text)[keep - 1] != '\n')
        keep--;
    free(text);
    if (keep == len)
        return SL_OK;
    sl_log(SL_LOG_WARN, "agent", "acks.log ends inside a line: cut %zu bytes", len - keep);
    sl__agent_path(a, "acks.log", path, sizeof path);
    if (truncate(path, (off_t)keep) != 0)
        return sl_status_from_errno(errno);
    {
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd >= 0) {
            fsync(fd);
            close(fd);
        }
    }
    return SL_OK;
}
