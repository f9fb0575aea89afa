#!/usr/bin/env python3
"""Extracts vLLM's Prometheus metric families (name, type, label names, histogram buckets)
from vLLM's source, without importing it: PrometheusStatLogger in vllm/v1/metrics/loggers.py,
PerfMetricsProm in vllm/v1/metrics/perf.py, the bucket families of vllm/v1/metrics/buckets.py
and the CacheConfig fields that become vllm:cache_config_info's labels.

    tools/vllm_metric_families.py ROOT > fixtures/vllm_metrics/families.json

ROOT is a vLLM checkout or an unpacked wheel (the folder that holds vllm/). Family names are
as exposed: a counter's family carries prometheus_client's `_total`. A family created inside
an `if` has `condition` (the test's source); its labels' fixed values are not extracted.
"""
import ast
import json
import sys
from pathlib import Path

KINDS = {"Gauge": "gauge", "Counter": "counter", "Histogram": "histogram",
         "_gauge_cls": "gauge", "_counter_cls": "counter", "_histogram_cls": "histogram"}


def bucket_families(path):
    tree = ast.parse(path.read_text())
    consts = {}
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            try:
                consts[node.target.id] = list(ast.literal_eval(node.value))
            except ValueError:
                pass
        if (isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") ==
                "_STATIC_FAMILY_DEFAULTS"):
            table = {k.value: consts[v.id] for k, v in zip(node.value.keys, node.value.values)}
    table["request_tokens"] = "1-2-5 series up to max_model_len"
    return table


def cache_config_fields(path):
    tree = ast.parse(path.read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "CacheConfig")
    fields = []
    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            if "ClassVar" not in ast.unparse(n.annotation):
                fields.append(n.target.id)
    return fields


class Extractor(ast.NodeVisitor):
    def __init__(self, buckets, cache_fields):
        self.buckets, self.cache_fields = buckets, cache_fields
        self.vars = {"labelnames": ["model_name", "engine"]}
        self.bucket_vars = {}
        self.conditions = []
        self.families = []

    def visit_If(self, node):
        self.conditions.append(ast.unparse(node.test))
        for n in node.body:
            self.visit(n)
        self.conditions.pop()
        for n in node.orelse:
            self.visit(n)

    def visit_Assign(self, node):
        target = node.targets[0]
        if isinstance(target, ast.Name) and isinstance(node.value, ast.Call):
            f = node.value.func
            if isinstance(f, ast.Name) and f.id == "histogram_buckets":
                self.bucket_vars[target.id] = node.value.args[0].value
        self.generic_visit(node)

    def labels(self, node):
        if isinstance(node, ast.Name):
            return list(self.vars[node.id])
        if isinstance(node, ast.BinOp):
            return self.labels(node.left) + self.labels(node.right)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.labels_elt(e) for e in node.elts]
        if "metrics_info" in ast.unparse(node):  # log_metrics_info: CacheConfig's fields
            return self.cache_fields + ["engine"]
        raise ValueError("labels: " + ast.unparse(node))

    def labels_elt(self, e):
        if isinstance(e, ast.Constant):
            return e.value
        return {"self.labelname_max_lora": "max_lora",
                "self.labelname_waiting_lora_adapters": "waiting_lora_adapters",
                "self.labelname_running_lora_adapters": "running_lora_adapters"}[ast.unparse(e)]

    def visit_Call(self, node):
        f = node.func
        kind = KINDS.get(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
        kw = {k.arg: k.value for k in node.keywords}
        if kind and "name" in kw:
            name = kw["name"]
            if isinstance(name, ast.Constant):
                names = [name.value]
            else:  # log_metrics_info's `name`, set per type
                names = ["vllm:cache_config_info"]
            for n in names:
                fam = {"name": n + ("_total" if kind == "counter" and not n.endswith("_total") else ""),
                       "type": kind, "labels": sorted(self.labels(kw["labelnames"]))}
                if kind == "histogram":
                    b = kw["buckets"]
                    key = self.bucket_vars[b.id] if isinstance(b, ast.Name) else None
                    fam["bucket_family"] = key
                    fam["buckets"] = self.buckets[key] if key else ast.literal_eval(b)
                if self.conditions:
                    fam["condition"] = " and ".join(self.conditions)
                self.families.append(fam)
        self.generic_visit(node)


def module_constants(path):
    consts = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name):
                try:
                    consts[target.id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
    return consts


def enum_values(path, class_name):
    cls = next(n for n in ast.walk(ast.parse(path.read_text()))
               if isinstance(n, ast.ClassDef) and n.name == class_name)
    return [n.value.value for n in cls.body
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)]


def label_values(root):
    """The fixed values of the labels that PrometheusStatLogger sets itself."""
    v = root / "vllm" / "v1"
    loggers = module_constants(v / "metrics" / "loggers.py")
    return {
        "vllm:request_success_total": {"finished_reason": list(
            module_constants(v / "engine" / "__init__.py")["FINISH_REASON_STRINGS"])},
        "vllm:num_requests_waiting_by_reason": {"reason": [
            loggers["WAITING_REASON_CAPACITY"], loggers["WAITING_REASON_DEFERRED"]]},
        "vllm:engine_sleep_state": {"sleep_state": list(loggers["sleep_state"])},
        "vllm:admission_rejections_total": {"reason": list(loggers["ADMISSION_REASONS"])},
        "vllm:prompt_tokens_by_source_total": {"source": list(
            module_constants(v / "metrics" / "stats.py")["ALL_SOURCES"])},
        "vllm:prompt_tokens_cached_by_source_total": {"source": enum_values(
            v / "metrics" / "cache_hit_source.py", "CacheHitSource")},
    }


def extract_class(path, class_name, extractor):
    tree = ast.parse(path.read_text())
    cls = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == class_name)
    for fn in cls.body:
        if isinstance(fn, ast.FunctionDef) and fn.name in ("__init__", "log_metrics_info"):
            extractor.visit(fn)


def main():
    root = Path(sys.argv[1])
    if not (root / "vllm").is_dir():
        sys.exit("usage: vllm_metric_families.py ROOT (the folder that holds vllm/)")
    m = root / "vllm" / "v1" / "metrics"
    ex = Extractor(bucket_families(m / "buckets.py"),
                   cache_config_fields(root / "vllm" / "config" / "cache.py"))
    extract_class(m / "loggers.py", "PrometheusStatLogger", ex)
    extract_class(m / "perf.py", "PerfMetricsProm", ex)
    fams = sorted(ex.families, key=lambda f: f["name"])
    values = label_values(root)
    for f in fams:
        if f["name"] in values:
            f["label_values"] = values[f["name"]]
    json.dump({"families": fams}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
