#!/usr/bin/env python3
"""Validates JSON instances against JSON schemas, independently of ferry.

Input: a file of JSON lines {"schema": text, "instance": text}. Output: one line per input,
"ok" or the reason it is not valid. Draft 2020-12 with its format checker.
"""
import json
import sys

import jsonschema


def main():
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            try:
                instance = json.loads(case["instance"])
            except ValueError as e:
                print("parse error: " + str(e).replace("\n", " "))
                continue
            schema = json.loads(case["schema"])
            try:
                jsonschema.Draft202012Validator(schema, format_checker=checker).validate(instance)
                print("ok")
            except jsonschema.ValidationError as e:
                print("invalid: " + e.message.replace("\n", " ")[:300])


if __name__ == "__main__":
    main()
