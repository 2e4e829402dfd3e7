#!/usr/bin/env python3
"""Style gate: the files of a component call each other down their layers, never up or in a circle.

    .ci/check_layers.py [ROOT] [--selftest]   exit 0: every call goes down; 1: a list

Each component below (every folder whose C files call each other) names its files' layers,
bottom first (files of one layer do not call each other). A call is a use, in one file, of a function or table that another file of the
component defines without `static` (the names the component's internal header shares). A file
that calls into its own layer or a layer above fails the gate, as does a .c file of the
component that the map does not place (a new file is given its layer here). `--selftest`
checks that a call up is caught.
"""
import os
import re
import sys

COMPONENTS = {
    # agent_int.h describes each layer
    "device/agent": [
        ["runtime.c", "relay.c", "poison.c", "data.c", "live.c"],
        ["state.c"],
        ["ledger.c"],
        ["model.c"],
        ["net.c"],
        ["spec.c", "task_data.c"],
        ["participate.c"],
        ["agent.c"],
        ["evaluator.c", "fleet.c"],
        ["cli.c"],
        ["main.c"],
    ],
    # store_int.h describes each layer
    "storage": [
        ["db.c", "devlist.c"],
        ["writer.c", "schema.c"],
        ["meta.c", "sessions.c", "models.c", "updates.c", "lead.c", "fleet.c", "backup.c"],
        ["rounds.c"],
        ["sqlite.c"],
        ["store.c"],
    ],
    # pg_int.h describes each layer
    "storage/pg": [
        ["pg_db.c"],
        ["pg_schema.c", "pg_meta.c", "pg_sessions.c", "pg_models.c", "pg_updates.c", "pg_lead.c",
         "pg_fleet.c", "pg_migrate.c"],
        ["pg_rounds.c"],
        ["pg_store.c"],
    ],
    # server_int.h describes each layer
    "api/server": [
        ["http.c"],
        ["views.c"],
        ["metrics.c"],
        ["sessions.c"],
        ["auth.c"],
        ["backup.c", "devices.c", "models.c", "uploads.c", "operators.c", "dashboard.c"],
        ["upload_create.c"],
        ["router.c"],
        ["workers.c"],
        ["daemon.c"],
    ],
    # client_int.h describes each layer
    "api/client": [
        ["http.c"],
        ["client.c"],
        ["transfer.c"],
    ],
    # codec_int.h: scalar references and primitives, SIMD kernels (AVX-512 over AVX2's helpers),
    # their dispatch, then the sections, frames, the supports of split updates, updates and the
    # compressor
    "codecs": [
        ["accumulate.c", "buf.c", "layout.c", "select_scalar.c", "shuffle.c", "values_scalar.c"],
        ["positions_adaptive.c", "select_avx2.c", "select_avx512.c", "select_neon.c",
         "values_avx2.c", "values_neon.c", "zstdio.c"],
        ["positions.c", "select_dispatch.c", "values_avx512.c"],
        ["select.c", "values.c"],
        ["frame.c"],
        ["support.c"],
        ["update.c"],
        ["compressor.c"],
    ],
    # nn_int.h: scalar references and kernels, their dispatch, layers and operators, the graph,
    # the models, training
    "device/nn": [
        ["elementwise_scalar.c", "gemm_kernel_avx2.c", "gemm_scalar.c", "loss.c", "ops_norm.c",
         "ops_shape.c", "spec.c"],
        ["elementwise_avx2.c", "elementwise_avx512.c", "elementwise_neon.c",
         "gemm_kernel_avx512.c", "gemm_kernel_neon.c", "optim.c"],
        ["elementwise.c", "gemm.c"],
        ["conv.c", "layers.c", "ops_conv.c", "ops_core.c", "ops_seq.c", "sgd.c"],
        ["ops_act.c"],
        ["graph.c"],
        ["models.c"],
        ["train.c"],
    ],
    # onnx_int.h describes each layer
    "device/onnx": [
        ["util.c", "report.c", "export.c"],
        ["import_base.c"],
        ["import_graph.c"],
        ["import_const.c"],
        ["import_rnn.c"],
        ["import_ops.c"],
        ["import.c"],
    ],
    # the rest, bottom to top as they are
    "device/data": [
        ["contract.c", "csv.c", "idx.c", "image.c", "logmel.c", "npy.c", "npz.c", "partition.c",
         "spool.c", "wav.c"],
        ["source.c"],
    ],
    "api/common": [["encoding.c"], ["session.c", "sign.c"], ["nonce.c"]],
    "api/cli": [
        ["cmd_common.c", "progress.c"],
        ["cmd_devices.c", "cmd_follow.c", "cmd_report.c", "cmd_status.c", "cmd_store.c",
         "cmd_task.c", "fetch.c"],
        ["cmd_backup.c", "cmd_model.c"],
        ["starling.c"],
    ],
    "common": [["clock.c", "cpu.c", "log.c", "status.c"], ["fs.c"], ["config.c"]],
    # coord_int.h describes each layer
    "coordinator": [
        ["config.c"],
        ["aggregate.c", "devices.c", "server.c", "spec_check.c", "select.c", "splits.c"],
        ["tasks.c"],
        ["replica.c"],
        ["lifecycle.c"],
        ["engine.c"],
        ["main.c"],
    ],
}

DEF = re.compile(r"^(?!static\b)(?:[A-Za-z_][\w \*]*?[\s\*])?(sl_\w+)\s*\([^;{]*?\)\s*\{", re.M | re.S)
TABLE = re.compile(r"^(?!static\b)const\s+[\w\s\*]*?\b(sl_\w+)\s*=", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def strip(text):
    return STRING.sub('""', COMMENT.sub(" ", text))


def check(sources, layers):
    """sources: {file: text}. Returns a list of complaints."""
    rank = {f: i for i, layer in enumerate(layers) for f in layer}
    bad = [f"{f}: not placed in a layer (.ci/check_layers.py)" for f in sorted(sources) if f not in rank]
    defined = {}
    code = {f: strip(t) for f, t in sources.items()}
    for f, text in code.items():
        for m in list(DEF.finditer(text)) + list(TABLE.finditer(text)):
            defined.setdefault(m.group(1), f)
    for f, text in sorted(code.items()):
        if f not in rank:
            continue
        for name, home in sorted(defined.items()):
            if home == f or home not in rank or rank[home] < rank[f]:
                continue
            if re.search(r"\b" + re.escape(name) + r"\b", text):
                where = "its own layer" if rank[home] == rank[f] else "a layer above"
                bad.append(f"{f} calls {name} of {home}: {where}")
    return bad


def selftest():
    layers = [["low.c"], ["high.c"]]
    ok = {"low.c": "int sl_low(void)\n{\n    return 1;\n}\n",
          "high.c": "int sl_high(void)\n{\n    return sl_low();\n}\n"}
    up = dict(ok, **{"low.c": "int sl_low(void)\n{\n    return sl_high();\n}\n"})
    comment = dict(ok, **{"low.c": "/* sl_high() is above */\nint sl_low(void)\n{\n    return 1;\n}\n"})
    assert check(ok, layers) == [], check(ok, layers)
    assert any("low.c calls sl_high" in b for b in check(up, layers)), check(up, layers)
    assert check(comment, layers) == [], check(comment, layers)
    assert any("not placed" in b for b in check(dict(ok, **{"new.c": ""}), layers))
    print("layers: selftest ok")


def main(argv):
    if "--selftest" in argv:
        selftest()
        return 0
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    bad = []
    for comp, layers in COMPONENTS.items():
        folder = os.path.join(root, comp)
        sources = {}
        for name in sorted(os.listdir(folder)):
            if name.endswith(".c"):
                with open(os.path.join(folder, name), encoding="utf-8") as fh:
                    sources[name] = fh.read()
        bad += [f"{comp}/{b}" for b in check(sources, layers)]
    for b in bad:
        print(f"layers: {b}", file=sys.stderr)
    if bad:
        print("layers: a file calls up or across its layer; see the component's internal header "
              "(agent_int.h, coord_int.h, store_int.h, pg_int.h, server_int.h, client_int.h) for its layers", file=sys.stderr)
        return 1
    print(f"layers: {', '.join(COMPONENTS)} call down only")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
