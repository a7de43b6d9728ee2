#!/usr/bin/env python3
"""Checks the security properties of rendered StreamBP manifests (the Helm
chart's output, deploy/kubernetes/) that no schema can see:

  closed    the coordinator authenticates both roles: --users FILE, or the
            shorthand --client-token-file and --worker-token-file; never
            --insecure. Every file it names is in a mounted Secret.
  users     a users file rendered into a Secret parses by the coordinator's
            rules (server/identity.cc: known keys, names of a-z 0-9 - _ .,
            role user or admin, 64-hex hashes listed once, integer quotas),
            and the SHA-256 of each plain token the manifests hold is in it:
            the workers' token under workers:, the client tokens of the pods
            that call the coordinator (helm test, examples/k8s-job.yaml) under
            users:.
  rotation  no Secret is mounted with subPath (a renewed certificate or an
            edited users file would never reach the pod).
  tls       with --tls-cert, the key and certificate come from one Secret, the
            workers and probes verify it with its ca.crt, and no worker can
            read the key; a cert-manager Certificate behind it names the
            address workers dial and the probes' server name, and its issuer
            chain (Issuer, CA Certificate) is complete.
  netpol    NetworkPolicies select the coordinator and the workers; no
            ingress rule is open to everyone; gRPC admits the workers; a
            worker accepts other peers on its metrics ports only; metrics
            come from namespaces (or addresses), never from any pod; every
            other pod in the manifests that dials the coordinator (the helm
            test pod, examples/k8s-job.yaml) is admitted to its gRPC port.

  check_security.py [--tls] [--network-policy] [--users]
                    [--external-issuer NAME]... FILE...

--tls, --network-policy and --users require those features to be present
(else they are checked only when present). Exit 0 when all pass, 1 otherwise.
"""
import argparse
import base64
import hashlib
import re
import sys

import yaml

NAME = re.compile(r"^[a-z0-9._-]{1,64}$")
HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def pod_spec(obj):
    if obj["kind"] == "Pod":
        return obj["spec"]
    if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
        return obj["spec"]["template"]["spec"]
    return None


def pod_labels(obj):
    if obj["kind"] == "Pod":
        return obj["metadata"].get("labels", {})
    return obj["spec"]["template"]["metadata"].get("labels", {})


def selects(selector, labels):
    if selector is None:
        return False
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


def worker_runs(container):
    """The sbp-worker command lines (argument lists) a container runs: its
    own, or each that its launcher starts (whole-node pods: bash
    .../sbp-workers sbp-worker ARGS --- sbp-worker ARGS ...)."""
    command, args = container.get("command", []), container.get("args", [])
    if command[:1] == ["sbp-worker"]:
        return [args]
    if command and command[-1].endswith("/sbp-workers"):
        runs, current = [], []
        for a in args + ["---"]:
            if a == "---":
                runs.append(current)
                current = []
            else:
                current.append(a)
        return [r[1:] for r in runs if r[:1] == ["sbp-worker"]]
    return []


def flags(container):
    """--flag=value arguments as a dict (value True for a bare --flag)."""
    out = {}
    for a in container.get("args", []):
        if a.startswith("--"):
            name, _, value = a.partition("=")
            out[name] = value if _ else True
    return out


def mounted_secret(spec, container, path):
    """(Secret name, key) that a file path in a container reads, or None."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        volume = volumes.get(m["name"], {})
        if "secret" not in volume or not path.startswith(m["mountPath"].rstrip("/") + "/"):
            continue
        rest = path[len(m["mountPath"].rstrip("/")) + 1:]
        items = volume["secret"].get("items")
        if items is None:
            return volume["secret"]["secretName"], rest
        for item in items:
            if item["path"] == rest:
                return volume["secret"]["secretName"], item["key"]
    return None


def secret_value(objects, name, key):
    for o in objects:
        if o["kind"] == "Secret" and o["metadata"]["name"] == name:
            if key in o.get("stringData", {}):
                return o["stringData"][key]
            if key in o.get("data", {}):
                return base64.b64decode(o["data"][key]).decode()
    return None


def users_file_errors(text):
    """The coordinator's rules for a users file; (errors, {role: hashes})."""
    errors, hashes = [], {"users": set(), "workers": set(), "admin": set()}
    root = yaml.safe_load(text)
    if root is None:
        return errors, hashes
    if not isinstance(root, dict):
        return ["top level: must be a mapping with users and workers"], hashes
    for key in root:
        if key not in ("users", "workers"):
            errors.append(f"top level: unknown key '{key}'")
    seen = set()
    for section in ("users", "workers"):
        names = set()
        entries = root.get(section) or []
        if not isinstance(entries, list):
            errors.append(f"{section}: must be a list")
            continue
        for i, e in enumerate(entries):
            where = f"{section}[{i}]"
            if not isinstance(e, dict):
                errors.append(f"{where}: must be a mapping")
                continue
            allowed = {"name", "role", "token_sha256", "quota"} if section == "users" else {
                "name", "token_sha256"}
            errors += [f"{where}: unknown key '{k}'" for k in e if k not in allowed]
            name = str(e.get("name", ""))
            if not NAME.match(name):
                errors.append(f"{where}.name: {name!r} is not 1-64 of a-z 0-9 - _ .")
            if name in names:
                errors.append(f"{section}: the name '{name}' is listed twice")
            names.add(name)
            role = e.get("role", "user")
            if section == "users" and role not in ("user", "admin"):
                errors.append(f"{where}.role: must be user or admin (got {role!r})")
            quota = e.get("quota")
            if quota is not None:
                if not isinstance(quota, dict):
                    errors.append(f"{where}.quota: must be a mapping")
                    quota = {}
                for k, v in quota.items():
                    if k == "max_priority":
                        ok = isinstance(v, int) and not isinstance(v, bool)
                    elif k in ("max_running_workers", "max_pending_jobs"):
                        ok = isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    else:
                        errors.append(f"{where}.quota: unknown key '{k}'")
                        continue
                    if not ok:
                        errors.append(f"{where}.quota.{k}: {v!r} is not a valid integer")
            tokens = e.get("token_sha256")
            if not isinstance(tokens, list) or not tokens:
                errors.append(f"{where}.token_sha256: must list at least one hex SHA-256")
                tokens = []
            for j, h in enumerate(tokens):
                if not isinstance(h, str) or not HEX64.match(h):
                    errors.append(f"{where}.token_sha256[{j}]: not 64 hex digits")
                    continue
                if h.lower() in seen:
                    errors.append(f"{where}.token_sha256[{j}]: listed twice")
                seen.add(h.lower())
                hashes[section].add(h.lower())
                if section == "users" and role == "admin":
                    hashes["admin"].add(h.lower())
    return errors, hashes


def sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def check(objects, args):
    errors = []
    workloads = [o for o in objects if pod_spec(o) is not None]

    def containers(command):
        return [(o, c) for o in workloads for c in pod_spec(o).get("containers", [])
                if c.get("command", [None])[0] == command]

    coordinators = containers("sbp-coordinator")
    # Each sbp-worker, as its container with that worker's arguments.
    workers = [(o, dict(c, args=run)) for o in workloads
               for c in pod_spec(o).get("containers", []) for run in worker_runs(c)]
    # Pods that call the coordinator as clients: the helm test pod, examples/k8s-job.yaml.
    client_containers = [
        (o, c) for o in workloads for c in pod_spec(o).get("containers", [])
        if c.get("command", [None])[0] != "sbp-coordinator" and not worker_runs(c) and
        "--coordinator" in " ".join(c.get("args", []) + c.get("command", []))]
    clients = list({id(o): o for o, _ in client_containers}.values())
    if len(coordinators) != 1:
        return [f"expected one sbp-coordinator container, found {len(coordinators)}"]
    coord_obj, coord = coordinators[0]
    coord_spec = pod_spec(coord_obj)
    cflags = flags(coord)

    # rotation
    for o in workloads:
        spec = pod_spec(o)
        secret_volumes = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
        for c in spec.get("containers", []) + spec.get("initContainers", []):
            for m in c.get("volumeMounts", []):
                if m["name"] in secret_volumes and m.get("subPath"):
                    errors.append(f"{o['kind']}/{o['metadata']['name']}: Secret volume "
                                  f"{m['name']} is mounted with subPath: updates never reach it")

    # closed
    if "--insecure" in cflags:
        errors.append("the coordinator runs with --insecure")
    if "--users" in cflags:
        files = ["--users"]
    elif "--client-token-file" in cflags and "--worker-token-file" in cflags:
        files = ["--client-token-file", "--worker-token-file"]
    else:
        files = []
        errors.append("the coordinator has neither --users nor both token files: a role is open")
    if args.users and "--users" not in cflags:
        errors.append("no --users: the coordinator runs on the single-token shorthand")
    for flag in files:
        if not mounted_secret(coord_spec, coord, cflags[flag]):
            errors.append(f"coordinator {flag}={cflags[flag]} is not in a mounted Secret")

    # users
    if "--users" in cflags and mounted_secret(coord_spec, coord, cflags["--users"]):
        name, key = mounted_secret(coord_spec, coord, cflags["--users"])
        text = secret_value(objects, name, key)
        if text is not None:
            file_errors, hashes = users_file_errors(text)
            errors += [f"Secret {name} key {key}: {e}" for e in file_errors]
            for role, pairs in (("workers", workers), ("users", client_containers)):
                for o, c in pairs:
                    path = flags(c).get("--token-file")
                    if path is None:
                        for a in c.get("args", []) + c.get("command", []):
                            m = re.search(r"--token-file[ =](\S+)", a)
                            path = m.group(1) if m else path
                    if path is None:
                        continue
                    source = mounted_secret(pod_spec(o), c, path)
                    if source is None:
                        errors.append(f"{o['metadata']['name']}: --token-file {path} is not in "
                                      f"a mounted Secret")
                        continue
                    token = secret_value(objects, *source)
                    if token is not None and sha256(token) not in hashes[role]:
                        errors.append(f"{o['metadata']['name']}: the SHA-256 of its token "
                                      f"({source[0]}/{source[1]}) is not under {role}: in {name}")

    # tls
    if args.tls and "--tls-cert" not in cflags:
        errors.append("the coordinator serves no TLS")
    if "--tls-cert" in cflags:
        cert = mounted_secret(coord_spec, coord, cflags["--tls-cert"])
        key = mounted_secret(coord_spec, coord, cflags.get("--tls-key", ""))
        if not cert or not key or cert[0] != key[0]:
            errors.append("--tls-cert and --tls-key are not from one mounted Secret")
        tls_secret = cert[0] if cert else None
        server_names = set()
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            command = coord.get(probe, {}).get("exec", {}).get("command", [])
            probe_flags = dict(a.partition("=")[::2] for a in command if a.startswith("--"))
            if "--tls-ca" not in probe_flags:
                errors.append(f"coordinator {probe}: does not verify TLS (--tls-ca)")
                continue
            if mounted_secret(coord_spec, coord, probe_flags["--tls-ca"]) != (tls_secret, "ca.crt"):
                errors.append(f"coordinator {probe}: --tls-ca is not the ca.crt of {tls_secret}")
            server_names.add(probe_flags.get("--tls-server-name"))
        dialed = set()
        for o, c in workers:
            wflags = flags(c)
            dialed.add(str(wflags.get("--coordinator", "")).rsplit(":", 1)[0])
            ca = mounted_secret(pod_spec(o), c, str(wflags.get("--tls-ca", "")))
            if ca != (tls_secret, "ca.crt"):
                errors.append(f"{o['metadata']['name']}: --tls-ca is not the ca.crt of {tls_secret}")
            for v in pod_spec(o).get("volumes", []):
                if v.get("secret", {}).get("secretName") == tls_secret:
                    keys = [i["key"] for i in v["secret"].get("items") or [{"key": "*"}]]
                    if keys != ["ca.crt"]:
                        errors.append(f"{o['metadata']['name']}: mounts {keys} of {tls_secret}, "
                                      f"not ca.crt alone (the key must stay with the coordinator)")
        certificates = [o for o in objects if o["kind"] == "Certificate"]
        if certificates:
            by_secret = {c["spec"]["secretName"]: c for c in certificates}
            serving = by_secret.get(tls_secret)
            if serving is None:
                errors.append(f"no Certificate writes {tls_secret}, the coordinator's TLS Secret")
            else:
                names = set(serving["spec"].get("dnsNames", []))
                for n in sorted((server_names | dialed) - names - {None, ""}):
                    errors.append(f"Certificate {serving['metadata']['name']} does not name {n}")
                if serving["spec"].get("isCA"):
                    errors.append("the coordinator serves a CA certificate")
            issuers = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Issuer"}
            ca_secrets = {c["spec"]["secretName"] for c in certificates if c["spec"].get("isCA")}
            for c in certificates:
                ref = c["spec"]["issuerRef"]
                if ref["name"] in args.external_issuer:
                    continue
                if ref.get("kind", "Issuer") != "Issuer" or ref["name"] not in issuers:
                    errors.append(f"Certificate {c['metadata']['name']}: issuer {ref} is not an "
                                  f"Issuer in these manifests")
            for name, issuer in issuers.items():
                secret = issuer["spec"].get("ca", {}).get("secretName")
                if secret is not None and secret not in ca_secrets:
                    errors.append(f"Issuer {name}: signs with {secret}, which no CA Certificate writes")
            for o in workloads:
                for v in pod_spec(o).get("volumes", []):
                    if v.get("secret", {}).get("secretName") in ca_secrets:
                        errors.append(f"{o['metadata']['name']}: mounts the CA's private key "
                                      f"({v['secret']['secretName']})")

    # netpol
    policies = [o for o in objects if o["kind"] == "NetworkPolicy"]
    if args.network_policy and not policies:
        errors.append("no NetworkPolicy")
    if policies:
        worker_objs = {id(o): o for o, _ in workers}.values()

        def ingress_policies(obj):
            return [p for p in policies if selects(p["spec"].get("podSelector"), pod_labels(obj))
                    and "Ingress" in p["spec"].get("policyTypes", ["Ingress"])]

        def is_worker_peer(peer):
            return (set(peer) == {"podSelector"} and
                    all(selects(peer["podSelector"], pod_labels(w)) for w in worker_objs))

        for p in policies:
            for i, rule in enumerate(p["spec"].get("ingress") or []):
                where = f"NetworkPolicy/{p['metadata']['name']} ingress[{i}]"
                peers = rule.get("from") or []
                if not peers:
                    errors.append(f"{where}: no from: open to every source")
                for peer in peers:
                    if peer == {} or peer.get("namespaceSelector") == {} and "podSelector" not in peer:
                        errors.append(f"{where}: peer {peer} admits every namespace")
                    if peer.get("ipBlock", {}).get("cidr") in ("0.0.0.0/0", "::/0"):
                        errors.append(f"{where}: peer {peer} admits every address")
                    if "podSelector" in peer and peer["podSelector"] == {} and "namespaceSelector" not in peer:
                        errors.append(f"{where}: peer {peer} admits every pod of the namespace")
                ports = {q.get("port") for q in rule.get("ports") or []}
                if any(str(q).startswith("metrics") for q in ports) and any("podSelector" in q and "namespaceSelector" not in q
                                              for q in peers):
                    errors.append(f"{where}: metrics from pods of the release's namespace, not "
                                  f"from the Prometheus namespace")
        for what, objs in (("coordinator", [coord_obj]), ("worker", list(worker_objs))):
            for o in objs:
                mine = ingress_policies(o)
                if not mine:
                    errors.append(f"no NetworkPolicy with Ingress selects the {what} pods")
                    continue
                rules = [r for p in mine for r in p["spec"].get("ingress") or []]
                if what == "coordinator":
                    if not any("grpc" in {q.get("port") for q in r.get("ports") or []} and
                               any(is_worker_peer(peer) for peer in r.get("from") or [])
                               for r in rules):
                        errors.append("the coordinator's gRPC port does not admit the workers")
                    for r in rules:
                        if not r.get("ports"):
                            errors.append("a coordinator ingress rule admits every port")
                    for client in clients:
                        if not any("grpc" in {q.get("port") for q in r.get("ports") or []} and
                                   any(set(peer) == {"podSelector"} and
                                       selects(peer["podSelector"], pod_labels(client))
                                       for peer in r.get("from") or [])
                                   for r in rules):
                            errors.append(f"{client['kind']}/{client['metadata']['name']} dials "
                                          f"the coordinator, but its NetworkPolicy does not admit it")
                else:
                    if not any(all(is_worker_peer(peer) for peer in r.get("from") or [{}])
                               for r in rules):
                        errors.append("no ingress rule admits the other workers (collectives)")
                    for r in rules:
                        ports = {q.get("port") for q in r.get("ports") or []}
                        if (not all(is_worker_peer(peer) for peer in r.get("from") or [{}])
                                and not (ports and all(str(q).startswith("metrics")
                                                       for q in ports))):
                            errors.append(f"a worker admits {r.get('from')} on {ports or 'every port'}, "
                                          f"not on its metrics port alone")
    return errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tls", action="store_true")
    parser.add_argument("--network-policy", action="store_true")
    parser.add_argument("--users", action="store_true")
    parser.add_argument("--external-issuer", action="append", default=[])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    failed = 0
    for path in args.files:
        for e in check(load(path), args):
            print(f"FAIL {path}: {e}")
            failed += 1
    print(f"check_security: {len(args.files)} file(s), {failed} problem(s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
