#!/usr/bin/env python3
"""Writes tests/bench/w1_schemas.json: 32 different JSON schemas for the
structured-output W1 benchmark (`loragate bench ... --json-schemas`), one per
sequence. Each is a real-world-shaped object (enums, bounded integers,
nested objects, formats, optional fields) that ends in a long field (a
string of >= 600 characters or an array of >= 48 integers) so that no
sequence can finish before W1's 64 output tokens: every row of every decode
step is masked, and the batch keeps W1's shape. Deterministic.

    python3 tests/bench/make_w1_schemas.py
"""
import json
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(2026)
NAMES = ["order", "invoice", "ticket", "patient", "flight", "review", "shipment", "user", "event", "recipe",
         "contract", "vehicle", "listing", "payment", "incident", "course"]
FIELDS = [("id", {"type": "integer", "minimum": 1, "maximum": 999999}),
          ("status", {"type": "string", "enum": ["open", "closed", "pending", "cancelled"]}),
          ("priority", {"type": "string", "enum": ["low", "medium", "high", "urgent"]}),
          ("email", {"type": "string", "format": "email"}),
          ("created", {"type": "string", "format": "date-time"}),
          ("score", {"type": "number", "minimum": 0, "maximum": 10}),
          ("active", {"type": "boolean"}),
          ("tags", {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 4}),
          ("owner", {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                                       "age": {"type": "integer", "minimum": 0, "maximum": 130}},
                     "required": ["name", "age"], "additionalProperties": False}),
          ("uuid", {"type": "string", "format": "uuid"}),
          ("count", {"type": "integer", "minimum": 0}),
          ("note", {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "null"}]})]


def schema(i):
    k = rng.randint(3, 6)
    props = {}
    for name, s in rng.sample(FIELDS, k):
        props[f"{name}_{i}" if rng.random() < 0.5 else name] = s
    if i % 2:
        props["body"] = {"type": "string", "minLength": 600}
    else:
        props["values"] = {"type": "array", "items": {"type": "integer", "minimum": -1000, "maximum": 1000},
                           "minItems": 48}
    return {"title": f"{NAMES[i % len(NAMES)]}_{i}", "type": "object", "properties": props,
            "required": list(props), "additionalProperties": False}


if __name__ == "__main__":
    out = [schema(i) for i in range(32)]
    with open(os.path.join(HERE, "w1_schemas.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
