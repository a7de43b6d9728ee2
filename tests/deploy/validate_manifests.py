#!/usr/bin/env python3
"""Validates Kubernetes manifests: every object against the Kubernetes JSON
schemas of one version (kubernetes-validate, strict: unknown fields are
errors), custom resources (ServiceMonitor, cert-manager's Issuer and
Certificate: their CRDs are not in the Kubernetes schemas) against the
committed schemas in schemas/, then a few cross-object checks the schemas
cannot make (selectors match pod labels, every volumeMount has a volume and
every ConfigMap volume its ConfigMap, named ports exist, no --flag is given
twice to one command, a NetworkPolicy selects pods of these manifests and
names only ports they declare).

  validate_manifests.py --kubernetes-version 1.31 [--resolve-secrets] FILE...

With --resolve-secrets, every Secret a pod mounts (and each key it picks)
must be one of the Secrets in the same file.

A kind without a schema is an error, not a warning. Exit 0 when every object
passes, 1 otherwise.
"""
import argparse
import json
import os
import sys

import jsonschema
import kubernetes_validate.utils as kv
import yaml

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")
# (apiVersion, kind) -> committed JSON schema of a custom resource.
CUSTOM_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
    ("cert-manager.io/v1", "Certificate"): "certificate-cert-manager-v1.json",
    ("cert-manager.io/v1", "Issuer"): "issuer-cert-manager-v1.json",
}
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job")


def load(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        if not isinstance(d, dict) or "apiVersion" not in d or "kind" not in d:
            raise ValueError(f"{path}: a document without apiVersion and kind")
    return docs


def name_of(obj):
    return f"{obj['kind']}/{obj.get('metadata', {}).get('name', '?')}"


def schema_errors(obj, version):
    key = (obj["apiVersion"], obj["kind"])
    if key in CUSTOM_SCHEMAS:
        with open(os.path.join(SCHEMA_DIR, CUSTOM_SCHEMAS[key])) as f:
            schema = json.load(f)
        validator = jsonschema.Draft7Validator(schema)
        return [f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}"
                for e in validator.iter_errors(obj)]
    try:
        kv.validate(obj, version, strict=True)
    except kv.ValidationError as e:
        return [f"{'.'.join(map(str, e.path)) or '<root>'}: {e.message}"]
    except kv.SchemaNotFoundError as e:
        return [e.message]
    return []


def pod_spec(obj):
    if obj["kind"] == "Pod":
        return obj.get("spec", {})
    if obj["kind"] in WORKLOADS:
        return obj["spec"]["template"].get("spec", {})
    return None


def pod_labels(obj):
    if obj["kind"] == "Pod":
        return obj.get("metadata", {}).get("labels", {})
    return obj["spec"]["template"].get("metadata", {}).get("labels", {})


def secret_errors(obj, all_objects):
    secrets = {o["metadata"]["name"]: set(o.get("data", {})) | set(o.get("stringData", {}))
               for o in all_objects if o["kind"] == "Secret"}
    errors = []
    for volume in (pod_spec(obj) or {}).get("volumes", []):
        if "secret" not in volume:
            continue
        name = volume["secret"]["secretName"]
        if name not in secrets:
            errors.append(f"volume {volume['name']}: no Secret {name} in these manifests")
            continue
        for item in volume["secret"].get("items", []):
            if item["key"] not in secrets[name]:
                errors.append(f"volume {volume['name']}: Secret {name} has no key {item['key']}")
    return errors


def selects(selector, labels):
    """Whether a LabelSelector (matchLabels, matchExpressions) matches labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if (op == "In" and labels.get(key) not in values or
                op == "NotIn" and labels.get(key) in values or
                op == "Exists" and key not in labels or
                op == "DoesNotExist" and key in labels):
            return False
    return True


def network_policy_errors(obj, all_objects):
    """The policy selects workloads of these manifests, and every named port
    of its ingress rules is a container port of each of them."""
    errors = []
    selector = obj["spec"].get("podSelector") or {}
    pods = [o for o in all_objects if o["kind"] in WORKLOADS and o["kind"] != "Job" and
            selects(selector, pod_labels(o))]
    if not pods:
        errors.append(f"spec.podSelector {selector} selects no workload in these manifests")
    for i, rule in enumerate(obj["spec"].get("ingress") or []):
        for port in rule.get("ports") or []:
            name = port.get("port")
            for w in pods:
                declared = {cp.get("name") for c in pod_spec(w).get("containers", [])
                            for cp in c.get("ports", [])}
                if isinstance(name, str) and name not in declared:
                    errors.append(f"spec.ingress[{i}]: port {name} is not a container port of "
                                  f"{name_of(w)}")
    return errors


def cross_errors(obj, all_objects):
    errors = []
    spec = pod_spec(obj)
    if spec is not None:
        if obj["kind"] in WORKLOADS and obj["kind"] != "Job":
            selector = obj["spec"]["selector"].get("matchLabels", {})
            labels = pod_labels(obj)
            if any(labels.get(k) != v for k, v in selector.items()):
                errors.append(f"spec.selector {selector} does not match the pod labels {labels}")
        volumes = {v["name"] for v in spec.get("volumes", [])}
        config_maps = {o["metadata"]["name"] for o in all_objects if o["kind"] == "ConfigMap"}
        for v in spec.get("volumes", []):
            name = (v.get("configMap") or {}).get("name")
            if name is not None and name not in config_maps:
                errors.append(f"volume {v['name']}: no ConfigMap {name} in these manifests")
        if obj["kind"] == "StatefulSet":
            volumes |= {t["metadata"]["name"] for t in obj["spec"].get("volumeClaimTemplates", [])}
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    errors.append(f"container {c['name']}: volumeMount {m['name']} has no volume")
            # A launcher's args hold several command lines, separated by "---"
            # (the chart's sbp-workers): each is checked on its own.
            runs = [[]]
            for a in c.get("args", []):
                if a == "---":
                    runs.append([])
                else:
                    runs[-1].append(a)
            for run in runs:
                flags = [a.split("=", 1)[0] for a in run if a.startswith("--")]
                for flag in sorted({f for f in flags if flags.count(f) > 1}):
                    errors.append(f"container {c['name']}: args repeat {flag}")
            ports = {p.get("name") for p in c.get("ports", [])}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                for kind in ("httpGet", "tcpSocket", "grpc"):
                    port = c.get(probe, {}).get(kind, {}).get("port")
                    if isinstance(port, str) and port not in ports:
                        errors.append(f"container {c['name']}: {probe} names port {port}, "
                                      f"which the container does not declare")
    if obj["kind"] == "NetworkPolicy":
        errors += network_policy_errors(obj, all_objects)
    if obj["kind"] == "Service" and obj["spec"].get("selector"):
        selector = obj["spec"]["selector"]
        pods = [o for o in all_objects if pod_spec(o) is not None and o["kind"] != "Pod" and
                all(pod_labels(o).get(k) == v for k, v in selector.items())]
        if not pods:
            errors.append(f"spec.selector {selector} selects no workload in these manifests")
        for p in obj["spec"].get("ports", []):
            target = p.get("targetPort")
            if isinstance(target, str) and not any(
                    target in {cp.get("name") for c in pod_spec(w).get("containers", [])
                               for cp in c.get("ports", [])} for w in pods):
                errors.append(f"port {p.get('name')}: targetPort {target} is not a container port")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubernetes-version", required=True)
    parser.add_argument("--resolve-secrets", action="store_true")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    failures = count = 0
    for path in args.files:
        try:
            objects = load(path)
        except (OSError, ValueError, yaml.YAMLError) as e:
            print(f"FAIL {path}: {e}")
            failures += 1
            continue
        if not objects:
            print(f"FAIL {path}: no objects")
            failures += 1
        for obj in objects:
            count += 1
            errors = schema_errors(obj, args.kubernetes_version) + cross_errors(obj, objects)
            if args.resolve_secrets:
                errors += secret_errors(obj, objects)
            for e in errors:
                print(f"FAIL {path}: {name_of(obj)}: {e}")
            failures += bool(errors)
    print(f"validate_manifests: {count} objects, {failures} failed "
          f"(Kubernetes {args.kubernetes_version}, strict)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
