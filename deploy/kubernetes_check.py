#!/usr/bin/env python3
"""Checks deploy/kubernetes against the Kubernetes API's schemas (issue 38).

1. Renders the kustomization: the subset of kustomize it uses (`resources`, `labels` with
   `pairs`, `images`) implemented below, and, where `kubectl` is installed, compared with
   `kubectl kustomize`'s rendering (the same objects, field for field). Debian ships no
   kustomize and PyPI no kustomize binary, so the renderer here keeps the check running
   everywhere; the comparison keeps it honest where the real one exists.
2. Validates every rendered object, and the Secret template, with `kubernetes-validate`
   (PyPI; the API's OpenAPI schemas, strict: unknown fields are errors) for Kubernetes
   1.30 and the newest version it knows.
3. Checks what the deployment needs: the coordinator's probes, resources and state on a
   PersistentVolumeClaim; the token from a Secret, never a ConfigMap; workers as a
   StatefulSet (or an Indexed Job) requesting GPUs; a PodDisruptionBudget over the workers.

Usage: deploy/kubernetes_check.py [DIR]   (default: deploy/kubernetes next to this file)
"""
import copy
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import yaml

try:
    import kubernetes_validate
except ImportError:  # make deps installs it
    sys.exit("kubernetes_check: kubernetes-validate is not installed (make deps: pip install "
             "kubernetes-validate)")

VERSIONS = ["1.30.0", kubernetes_validate.latest_version()]
failures = []


def fail(message):
    failures.append(message)


def load_all(path):
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def pod_specs(obj):
    """The pod specs of a workload object (templates), or []."""
    kind = obj.get("kind")
    spec = obj.get("spec", {})
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return [spec.get("template", {}).get("spec", {})]
    if kind == "CronJob":
        return [spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})]
    if kind == "Pod":
        return [spec]
    return []


def split_image(reference):
    """("registry/name", "tag") of an image reference (digest dropped; tag "" if none)."""
    reference = reference.split("@")[0]
    colon = reference.rfind(":")
    if colon > reference.rfind("/"):
        return reference[:colon], reference[colon + 1:]
    return reference, ""


def render(directory):
    """kustomize's rendering of the fields this kustomization uses; refuses any other."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    known = {"apiVersion", "kind", "resources", "labels", "images"}
    unknown = set(kustomization) - known
    if unknown:
        sys.exit(f"kubernetes_check: kustomization fields {sorted(unknown)} are not rendered here "
                 "(extend render() or drop them)")
    objects = []
    for resource in kustomization.get("resources", []):
        objects += load_all(directory / resource)
    for label in kustomization.get("labels", []):
        if set(label) - {"pairs"}:
            sys.exit(f"kubernetes_check: label options {sorted(set(label) - {'pairs'})} not rendered")
        for obj in objects:  # without includeSelectors/includeTemplates: metadata only
            obj.setdefault("metadata", {}).setdefault("labels", {}).update(label["pairs"])
    for image in kustomization.get("images", []):
        for obj in objects:
            for spec in pod_specs(obj):
                for container in spec.get("containers", []) + spec.get("initContainers", []):
                    name, tag = split_image(container.get("image", ""))
                    if name == image["name"]:
                        tag = image.get("newTag", tag)
                        container["image"] = image.get("newName", name) + (f":{tag}" if tag else "")
    return objects


def key(obj):
    return (obj.get("kind"), obj.get("metadata", {}).get("name"))


def compare_with_kubectl(directory, objects):
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        print("kubectl not found: the rendering is compared with kustomize's only where kubectl "
              "is installed")
        return
    with tempfile.TemporaryDirectory() as home:
        run = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True,
                             env=dict(os.environ, HOME=home), timeout=120)
    if run.returncode != 0:
        fail(f"kubectl kustomize failed: {run.stderr.strip()[-500:]}")
        return
    theirs = {key(o): o for o in yaml.safe_load_all(run.stdout) if o}
    ours = {key(o): o for o in objects}
    if set(theirs) != set(ours):
        fail(f"kubectl kustomize renders {sorted(theirs)}, this renderer {sorted(ours)}")
    for k in sorted(set(theirs) & set(ours), key=str):
        if theirs[k] != ours[k]:
            fail(f"{k}: kubectl kustomize renders it differently:\n{yaml.safe_dump(theirs[k])}\n"
                 f"this renderer:\n{yaml.safe_dump(ours[k])}")
    print(f"kubectl kustomize ({kubectl}): the same {len(theirs)} objects, field for field")


def validate(objects, source):
    for obj in objects:
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(copy.deepcopy(obj), version, strict=True)
            except kubernetes_validate.ValidationError as error:
                fail(f"{source} {key(obj)} against Kubernetes {version}: {error.message} "
                     f"(at {'/'.join(str(p) for p in error.path)})")
            except Exception as error:  # a schema the validator does not have
                fail(f"{source} {key(obj)} against Kubernetes {version}: {error}")
    print(f"{source}: {len(objects)} objects validated (strict) against Kubernetes "
          f"{', '.join(VERSIONS)}")


def check_policy(objects, quiet=False):
    by_kind = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    coordinators = [o for o in by_kind.get("Deployment", []) + by_kind.get("StatefulSet", [])
                    if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "coordinator"]
    if len(coordinators) != 1:
        fail(f"expected one coordinator workload, found {len(coordinators)}")
    claims = {o["metadata"]["name"] for o in by_kind.get("PersistentVolumeClaim", [])}
    for obj in coordinators:
        spec = pod_specs(obj)[0]
        container = spec["containers"][0]
        for probe in ("readinessProbe", "livenessProbe"):
            if probe not in container:
                fail(f"the coordinator has no {probe}")
        if "requests" not in container.get("resources", {}):
            fail("the coordinator requests no resources")
        state_dir = next((a.split("=", 1)[1] for a in container.get("args", [])
                          if a.startswith("--state_dir=")), None)
        mount = next((m for m in container.get("volumeMounts", []) if m["mountPath"] == state_dir), None)
        volume = next((v for v in spec.get("volumes", []) if mount and v["name"] == mount["name"]), {})
        claim = volume.get("persistentVolumeClaim", {}).get("claimName")
        if claim is None or claim not in claims:
            fail(f"the coordinator's --state_dir ({state_dir}) is not on a PersistentVolumeClaim "
                 f"of these manifests (claims: {sorted(claims)})")
    for obj in objects:
        for spec in pod_specs(obj):
            for volume in spec.get("volumes", []):
                if volume["name"] == "token" or "token" in volume.get("configMap", {}).get("name", ""):
                    if "secret" not in volume:
                        fail(f"{key(obj)}: the token volume is not a Secret: {volume}")
    workers = [o for o in objects if o["metadata"].get("labels", {}).get("app.kubernetes.io/component")
               == "worker" and o["kind"] in ("StatefulSet", "Job")]
    if not workers:
        fail("the workers are neither a StatefulSet nor an Indexed Job")
    for obj in workers:
        if obj["kind"] == "Job" and obj["spec"].get("completionMode") != "Indexed":
            fail(f"{key(obj)}: a Job of workers must be Indexed")
        container = pod_specs(obj)[0]["containers"][0]
        resources = container.get("resources", {})
        if not any("nvidia.com/gpu" in resources.get(part, {}) for part in ("requests", "limits")):
            fail(f"{key(obj)}: the workers request no GPU (nvidia.com/gpu)")
        if "requests" not in resources:
            fail(f"{key(obj)}: the workers request no CPU or memory")
        selector = obj["spec"]["selector"]["matchLabels"]
        budgets = [b for b in by_kind.get("PodDisruptionBudget", [])
                   if b["spec"].get("selector", {}).get("matchLabels") == selector]
        if not budgets:
            fail(f"{key(obj)}: no PodDisruptionBudget selects the workers ({selector})")
    if not quiet:
        print(f"policy: checked {len(objects)} objects (probes, resources, state on a claim, "
              "the token from a Secret, GPU workers, disruption budget)")


def self_test(objects):
    """The policy checks catch what they are for: each defect planted in a copy fails."""
    global failures
    defects = {
        "token from a ConfigMap": lambda objs: [
            v.update({"configMap": {"name": "mtrain-token"}}) or v.pop("secret")
            for o in objs for spec in pod_specs(o) for v in spec.get("volumes", [])
            if v["name"] == "token"],
        "no disruption budget": lambda objs: objs.__setitem__(
            slice(None), [o for o in objs if o["kind"] != "PodDisruptionBudget"]),
        "no GPU requested": lambda objs: [
            c["resources"][part].pop("nvidia.com/gpu", None)
            for o in objs if o["kind"] == "StatefulSet" for spec in pod_specs(o)
            for c in spec["containers"] for part in ("requests", "limits")],
        "state not on a claim": lambda objs: objs.__setitem__(
            slice(None), [o for o in objs if o["kind"] != "PersistentVolumeClaim"]),
    }
    kept = failures
    for name, plant in defects.items():
        failures = []
        broken = copy.deepcopy(objects)
        plant(broken)
        check_policy(broken, quiet=True)
        if not failures:
            kept.append(f"self-test: the policy checks missed a planted defect ({name})")
            print(f"FAIL: self-test: {name} not caught")
    failures = kept
    # And the schema validation: an unknown field is refused (strict).
    bad = copy.deepcopy(objects[0])
    bad.setdefault("spec", {})["notAField"] = 1
    try:
        kubernetes_validate.validate(bad, VERSIONS[0], strict=True)
        failures.append("self-test: strict validation accepted an unknown field")
    except kubernetes_validate.ValidationError:
        pass
    print(f"self-test: {len(defects)} planted defects and an unknown field each caught")


def main():
    directory = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else \
        pathlib.Path(__file__).resolve().parent / "kubernetes"
    objects = render(directory)
    compare_with_kubectl(directory, objects)
    validate(objects, "deploy/kubernetes (rendered)")
    validate(load_all(directory / "token-secret.yaml"), "token-secret.yaml (template)")
    check_policy(objects)
    self_test(objects)
    if failures:
        for message in failures:
            print(f"FAIL: {message}")
        print(f"{len(failures)} failure(s)")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
