#!/usr/bin/python3
"""dockerfile.py - read deploy/Dockerfile the way the tests need it.

As a module: parse(path) gives the stages and their instructions
(check_deploy.py). As a program:

    dockerfile.py DOCKERFILE STAGE

prints the stage as a bash script of calls (df_from, df_copy, df_run,
df_env, df_volume, df_workdir, df_user, df_expose, df_stopsignal,
df_healthcheck, df_entrypoint, df_cmd), every argument shell-quoted, for
test_rootfs.sh to carry out in a root filesystem. Anything outside the
subset below is an error rather than a silent difference from Docker:
instructions FROM, WORKDIR, COPY (flag --from only), RUN (shell form), ENV
(KEY=VALUE pairs without $), VOLUME, USER, EXPOSE, STOPSIGNAL,
HEALTHCHECK (flags, then CMD in shell or JSON form), ENTRYPOINT and CMD in
JSON form.
"""
import json
import re
import shlex
import sys

KNOWN = {"FROM", "WORKDIR", "COPY", "RUN", "ENV", "VOLUME", "USER", "EXPOSE", "STOPSIGNAL",
         "HEALTHCHECK", "ENTRYPOINT", "CMD"}


class DockerfileError(Exception):
    pass


def logical_lines(text):
    """Instructions with their continuations joined, as Docker's parser does:
    a trailing backslash continues the line; comment lines and empty lines
    inside a continuation are dropped; the parser directive is skipped."""
    out, cur, first = [], None, None
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if cur is None:
            if stripped == "" or stripped.startswith("#"):
                continue
            cur, first = "", n
        elif stripped == "" or stripped.startswith("#"):
            continue
        if raw.rstrip().endswith("\\"):
            cur += raw.rstrip()[:-1]
            continue
        cur += raw
        out.append((first, cur.strip()))
        cur = None
    if cur is not None:
        raise DockerfileError("line %d: the file ends inside a continuation" % first)
    return out


def split_flags(args):
    """Leading --name=value flags, then the rest."""
    flags = {}
    while args.startswith("--"):
        word, _, rest = args.partition(" ")
        name, eq, value = word[2:].partition("=")
        if not eq:
            raise DockerfileError("flag %s without a value" % word)
        flags[name] = value
        args = rest.lstrip()
    return flags, args


def parse(path):
    """[{'name', 'image', 'line', 'instructions': [(line, KEYWORD, flags, value)]}].
    value: str (shell form, or the rest of the line), list (JSON form), or
    for ENV a list of (key, value)."""
    with open(path, encoding="utf-8") as f:
        lines = logical_lines(f.read())
    stages = []
    for line, text in lines:
        keyword, _, args = text.partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword not in KNOWN:
            raise DockerfileError("line %d: %s is not in the subset the tests understand"
                                  % (line, keyword))
        flags, args = split_flags(args) if keyword in ("FROM", "COPY", "HEALTHCHECK") \
            else ({}, args)
        if keyword == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", args, re.IGNORECASE)
            if m is None:
                raise DockerfileError("line %d: FROM %s" % (line, args))
            stages.append({"name": m.group(2) or str(len(stages)), "image": m.group(1),
                           "line": line, "instructions": []})
            continue
        if not stages:
            raise DockerfileError("line %d: %s before FROM" % (line, keyword))
        value = args
        if keyword == "COPY":
            if set(flags) - {"from"}:
                raise DockerfileError("line %d: COPY flags %s" % (line, sorted(flags)))
            value = args.split()
            if len(value) != 2:
                raise DockerfileError("line %d: COPY takes one source and one destination here"
                                      % line)
        elif keyword == "ENV":
            pairs = []
            for word in shlex.split(args):
                key, eq, val = word.partition("=")
                if not eq or "$" in val:
                    raise DockerfileError("line %d: ENV %s (KEY=VALUE without $ only)"
                                          % (line, word))
                pairs.append((key, val))
            value = pairs
        elif keyword in ("ENTRYPOINT", "CMD", "VOLUME"):
            if not args.startswith("["):
                raise DockerfileError("line %d: %s in JSON form only" % (line, keyword))
            value = json.loads(args)
        elif keyword == "HEALTHCHECK":
            head, _, rest = args.partition(" ")
            if head.upper() != "CMD":
                raise DockerfileError("line %d: HEALTHCHECK %s" % (line, head))
            rest = rest.strip()
            value = json.loads(rest) if rest.startswith("[") else rest
        elif keyword == "RUN" and args.startswith("["):
            raise DockerfileError("line %d: RUN in shell form only" % line)
        stages[-1]["instructions"].append((line, keyword, flags, value))
    return stages


def stage(stages, name):
    for s in stages:
        if s["name"] == name:
            return s
    raise DockerfileError("no stage named %s" % name)


def as_bash(st):
    q = shlex.quote
    out = ["df_from %s" % q(st["image"])]
    for _line, kw, flags, value in st["instructions"]:
        if kw == "COPY":
            out.append("df_copy %s %s %s" % (q(flags.get("from", "")), q(value[0]), q(value[1])))
        elif kw == "ENV":
            out.extend("df_env %s %s" % (q(k), q(v)) for k, v in value)
        elif kw in ("ENTRYPOINT", "CMD", "VOLUME"):
            out.append("df_%s %s" % (kw.lower(), " ".join(q(a) for a in value)))
        elif kw == "HEALTHCHECK":
            if isinstance(value, list):  # ["CMD", prog, args...] or ["CMD-SHELL", cmd]
                value = value[1] if value[0] == "CMD-SHELL" else " ".join(q(a) for a in value[1:])
            out.append("df_healthcheck %s" % q(value))
        else:
            out.append("df_%s %s" % (kw.lower(), q(value)))
    return "\n".join(out) + "\n"


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: dockerfile.py DOCKERFILE STAGE\n")
        return 2
    try:
        sys.stdout.write(as_bash(stage(parse(argv[1]), argv[2])))
    except (DockerfileError, OSError, ValueError) as e:
        sys.stderr.write("dockerfile.py: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
