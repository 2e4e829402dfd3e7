#!/usr/bin/env python3
"""Check JSON responses recorded by test_api_server against api/openapi.yaml.

usage: check_openapi.py OPENAPI_YAML RECORDS_JSONL

Each record is {"method", "path" (as requested, without the query),
"status", "content_type", "body"}: every JSON answer the tests received.
The path is matched against the templates of openapi.yaml. A record must
match a documented response of its operation (the status and the media
type are listed, the body validates against the schema); a path no
template matches, or a method its path does not have, must be answered
with a problem document (404, 405). The validator covers the JSON Schema subset openapi.yaml uses:
$ref, allOf, oneOf, type (also lists), const, enum, pattern, minimum,
maximum, required, properties, additionalProperties, items.

Exit status: 0 all good, 1 mismatches (printed), 77 PyYAML is missing.
"""
import json
import re
import sys

try:
    import yaml
except ImportError:
    sys.exit(77)


def resolve(doc, node):
    while isinstance(node, dict) and "$ref" in node:
        ref = node["$ref"]
        if not ref.startswith("#/"):
            raise ValueError("only local $ref: " + ref)
        cur = doc
        for part in ref[2:].split("/"):
            cur = cur[part]
        node = cur
    return node


def is_type(value, name):
    if name == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"object": dict, "array": list, "string": str,
                              "boolean": bool, "null": type(None)}[name])


def validate(doc, schema, value, where, errors):
    schema = resolve(doc, schema)
    for sub in schema.get("allOf", []):
        validate(doc, sub, value, where, errors)
    if "oneOf" in schema:
        ok = 0
        for sub in schema["oneOf"]:
            trial = []
            validate(doc, sub, value, where, trial)
            ok += not trial
        if ok != 1:
            errors.append("%s: matches %d of oneOf" % (where, ok))
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(is_type(value, n) for n in names):
            errors.append("%s: %r is not %s" % (where, value, "/".join(names)))
            return
    if "const" in schema and value != schema["const"]:
        errors.append("%s: %r != const %r" % (where, value, schema["const"]))
    if "enum" in schema and value not in schema["enum"]:
        errors.append("%s: %r not in %r" % (where, value, schema["enum"]))
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        errors.append("%s: %r does not match %s" % (where, value, schema["pattern"]))
    if is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errors.append("%s: %r < minimum %r" % (where, value, schema["minimum"]))
        if "maximum" in schema and value > schema["maximum"]:
            errors.append("%s: %r > maximum %r" % (where, value, schema["maximum"]))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                errors.append("%s: missing required %s" % (where, name))
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                validate(doc, props[name], item, where + "." + name, errors)
            elif extra is False:
                errors.append("%s: unexpected member %s" % (where, name))
            elif isinstance(extra, dict):
                validate(doc, extra, item, where + "." + name, errors)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            validate(doc, schema["items"], item, "%s[%d]" % (where, i), errors)


def template_for(doc, path):
    segs = path.split("/")
    for tmpl in doc["paths"]:
        tsegs = tmpl.split("/")
        if len(tsegs) == len(segs) and all(
                t == p or (t.startswith("{") and t.endswith("}") and p)
                for t, p in zip(tsegs, segs)):
            return tmpl
    return None


def main():
    doc = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
    problem = doc["components"]["schemas"]["Problem"]
    errors, seen, checked = [], set(), 0
    for lineno, line in enumerate(open(sys.argv[2], encoding="utf-8"), 1):
        rec = json.loads(line)
        rec["method"] = rec["method"].lower()
        where = "%s %s %s (record %d)" % (rec["method"].upper(), rec["path"], rec["status"],
                                          lineno)
        tmpl = template_for(doc, rec["path"])
        if "body" not in rec:
            errors.append(where + ": the body is not JSON: %r" % rec.get("body_unparsed"))
            continue
        media = rec["content_type"].split(";")[0].strip()
        checked += 1
        op = doc["paths"][tmpl].get(rec["method"]) if tmpl else None
        if op is None:  # no such route or method: 404 / 405 problem documents
            expect = 405 if tmpl else 404
            if media != "application/problem+json" or rec["status"] != expect:
                errors.append(where + ": expected a %d problem document" % expect)
            validate(doc, problem, rec["body"], where, errors)
            continue
        resp = op.get("responses", {}).get(str(rec["status"]))
        if resp is None:
            errors.append(where + ": status not documented")
            continue
        content = resolve(doc, resp).get("content", {})
        if media not in content:
            errors.append(where + ": media type %s not documented (%s)" %
                          (media, ", ".join(content) or "none"))
            continue
        validate(doc, content[media]["schema"], rec["body"], where, errors)
        seen.add((tmpl, rec["method"], str(rec["status"])))
    for e in errors:
        print("openapi:", e)
    documented = sum(
        1 for path, ops in doc["paths"].items() for m, op in ops.items()
        for st, r in op.get("responses", {}).items()
        if "application/json" in resolve(doc, r).get("content", {}))
    json_seen = sum(1 for p, m, s in seen
                    if "application/json" in resolve(doc, doc["paths"][p][m]["responses"][s])
                    .get("content", {}))
    print("openapi: %d responses checked, %d of %d documented JSON success responses seen"
          % (checked, json_seen, documented))
    if checked == 0:
        print("openapi: no records")
        return 1
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
