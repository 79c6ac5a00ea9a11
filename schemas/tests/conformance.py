#!/usr/bin/env python3
"""Schema conformance test: the C++ EventParser against python-jsonschema.

For every entry of the corpus (make_corpus.py), the Python verdict is:

  1. the bytes decode as UTF-8 (strictly), else invalid;
  2. json.loads accepts the text, with duplicate keys in any object and the
     NaN/Infinity extensions rejected, else invalid;
  3. the document is acceptable interchange JSON as tally defines it: no
     string or key holds a lone surrogate (json.loads lets "\\ud800"
     through; it cannot be UTF-8) and containers nest at most MAX_DEPTH
     deep, else invalid;
  4. it is an object whose "type" is a string naming a schema file, else
     invalid;
  5. Draft202012Validator (format checking off) accepts it against
     schemas/json/<type>.json, $refs to defs.json resolved offline.

schemas_validate (C++) reads the same corpus and prints one line per entry.
Any disagreement fails the test, as does a hand-written entry whose Python
verdict is not the one it states (which would mean the schema files are
wrong). Run by ctest as schemas_conformance; needs Debian's /usr/bin/python3
with python3-jsonschema.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_corpus  # noqa: E402

if hasattr(sys, "set_int_max_str_digits"):
    # CPython's limit on int() of long digit strings is not a JSON rule.
    sys.set_int_max_str_digits(0)


class Rejected(ValueError):
    pass


def reject_duplicates(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise Rejected(f"duplicate key {k!r}")
        seen.add(k)
    return dict(pairs)


def reject_constant(name):
    raise Rejected(f"non-standard constant {name}")


def check_interchange(v, depth=1):
    """Raises Rejected on a lone surrogate or nesting deeper than MAX_DEPTH."""
    def check_str(s):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in s):
            raise Rejected("lone surrogate")

    if isinstance(v, str):
        check_str(v)
    elif isinstance(v, (dict, list)):
        if depth > make_corpus.MAX_DEPTH:
            raise Rejected("nesting too deep")
        items = v.items() if isinstance(v, dict) else ((None, x) for x in v)
        for k, x in items:
            if k is not None:
                check_str(k)
            check_interchange(x, depth + 1)


def load_validators(schema_dir):
    schemas = {}
    for path in sorted(glob.glob(os.path.join(schema_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            s = json.load(f)
        jsonschema.Draft202012Validator.check_schema(s)
        name = os.path.basename(path)[:-len(".json")]
        for key in ("$schema", "$id", "title", "description"):
            if key not in s:
                raise SystemExit(f"{path}: no {key}")
        if not s["$id"].endswith("/" + name + ".json"):
            raise SystemExit(f"{path}: $id {s['$id']} does not name the file")
        schemas[name] = s
    defs = schemas.pop("defs", None)
    if defs is None:
        raise SystemExit(f"{schema_dir}: no defs.json")
    pattern = defs["$defs"]["id_string"]["pattern"]
    if pattern != make_corpus.id_pattern():
        raise SystemExit("defs.json id_string pattern differs from make_corpus.id_pattern()")
    if sorted(schemas) != sorted(make_corpus.TYPES):
        raise SystemExit(f"schema files {sorted(schemas)} != event types")
    store = {s["$id"]: s for s in list(schemas.values()) + [defs]}
    validators = {}
    for name, s in schemas.items():
        if s.get("title") != name or s["properties"]["type"].get("const") != name:
            raise SystemExit(f"{name}.json: title or type const is not {name!r}")
        resolver = jsonschema.RefResolver.from_schema(s, store=store)
        validators[name] = jsonschema.Draft202012Validator(s, resolver=resolver)
    return validators


def python_verdict(data, validators):
    """(True, "") or (False, reason)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        return False, f"not UTF-8: {e.reason}"
    try:
        doc = json.loads(text, object_pairs_hook=reject_duplicates,
                         parse_constant=reject_constant)
        check_interchange(doc)
    except (ValueError, RecursionError) as e:  # JSONDecodeError and Rejected are ValueErrors
        return False, f"not accepted JSON: {type(e).__name__}: {e}"
    if not isinstance(doc, dict):
        return False, "not an object"
    t = doc.get("type")
    if not isinstance(t, str) or t not in validators:
        return False, f"no schema for type {t!r}"
    error = jsonschema.exceptions.best_match(validators[t].iter_errors(doc))
    if error is not None:
        return False, f"schema: {'/'.join(map(str, error.absolute_path))}: {error.message}"
    return True, ""


def show(data, limit=300):
    r = repr(data)
    return r if len(r) <= limit else r[:limit] + f"... ({len(data)} bytes)"


def main():
    ap = argparse.ArgumentParser(description="EventParser vs python-jsonschema")
    ap.add_argument("--validator", required=True, help="path of schemas_validate")
    ap.add_argument("--schemas", required=True, help="the schemas/json directory")
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--random", type=int, default=3000, help="randomized entries")
    ap.add_argument("--keep", help="also write the corpus file here")
    args = ap.parse_args()

    validators = load_validators(args.schemas)
    entries = make_corpus.build(args.seed, args.random)

    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or os.path.join(tmp, "corpus.bin")
        make_corpus.write(path, entries)
        run = subprocess.run([args.validator, path], capture_output=True, check=False)
    if run.returncode != 0:
        print(f"schemas_validate exited {run.returncode}: {run.stderr.decode(errors='replace')}")
        return 1
    lines = run.stdout.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) != len(entries):
        print(f"schemas_validate printed {len(lines)} lines for {len(entries)} entries "
              "(a reason with a line break?)")
        return 1

    failures = 0
    counts = {"valid": 0, "invalid": 0}
    for entry, line in zip(entries, lines):
        py_ok, py_reason = python_verdict(entry.data, validators)
        counts["valid" if py_ok else "invalid"] += 1
        verdict, _, cpp_reason = line.partition("\t")
        problems = []
        if verdict not in ("ok", "invalid"):
            problems.append(f"C++ tool reported: {line}")
        elif (verdict == "ok") != py_ok:
            problems.append("C++ and Python disagree")
        elif verdict == "invalid" and not cpp_reason.strip():
            problems.append("C++ gave no reason")
        if entry.expect is not None and entry.expect != py_ok:
            problems.append(f"schema files say {'valid' if py_ok else 'invalid'}, "
                            f"the corpus expects {'valid' if entry.expect else 'invalid'}")
        if problems:
            failures += 1
            print(f"FAIL {entry.name}: {'; '.join(problems)}\n"
                  f"  bytes:  {show(entry.data)}\n"
                  f"  python: {'valid' if py_ok else py_reason}\n"
                  f"  c++:    {line}")

    print(f"{len(entries)} entries ({counts['valid']} valid, {counts['invalid']} invalid, "
          f"seed {args.seed}): {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
