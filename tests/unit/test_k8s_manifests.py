"""``infra/k8s``: every overlay renders with ``kubectl kustomize`` and validates with
``kubernetes-validate --strict`` against two Kubernetes versions (offline, bundled
schemas); a failure says the tool's own message. The manifests hold no secret, and the
autoscalers ask for metrics the prometheus-adapter rules serve."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.k8s import K8S, OVERLAYS, VERSIONS, documents, render, validate


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_renders_and_validates_strictly(overlay: str, tmp_path: Path) -> None:
    rendered = tmp_path / f"{overlay}.yaml"
    rendered.write_text(render(overlay))
    kinds = {doc["kind"] for doc in yaml.safe_load_all(rendered.read_text()) if doc}
    assert {"Deployment", "Job", "HorizontalPodAutoscaler", "NetworkPolicy"} <= kinds
    for version in VERSIONS:
        done = validate(rendered, version)
        assert done.returncode == 0, (
            f"kubernetes-validate --strict -k {version} ({overlay}):\n{done.stdout}{done.stderr}"
        )


def test_the_validation_fails_on_an_unknown_field(tmp_path: Path) -> None:
    """The strict check is a real one: a field Kubernetes does not know fails it, named."""
    broken = render("dev").replace(
        "restartPolicy: OnFailure", "restartPolicy: OnFailure\n      restartPolicyy: Never", 1
    )
    (tmp_path / "broken.yaml").write_text(broken)
    done = validate(tmp_path / "broken.yaml", VERSIONS[0])
    assert done.returncode != 0
    assert "restartPolicyy" in done.stdout + done.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_secret_value_is_in_the_manifests(overlay: str) -> None:
    """Secrets are references to one Secret made outside the manifests."""
    found = documents(overlay)
    assert not [doc for doc in found if doc["kind"] == "Secret"]
    text = yaml.safe_dump_all(found)
    references = [ref for doc in found for ref in _secret_references(doc)]
    assert references and set(references) == {"brainhands"}
    assert "password" not in text.lower().replace("passfile", "")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_autoscalers_ask_for_metrics_the_adapter_serves(overlay: str) -> None:
    rules = yaml.safe_load((K8S / "addons" / "prometheus-adapter-values.yaml").read_text())
    served = {rule["name"]["as"] for rule in rules["rules"]["external"]}
    asked = {
        metric["external"]["metric"]["name"]
        for doc in documents(overlay)
        if doc["kind"] == "HorizontalPodAutoscaler"
        for metric in doc["spec"]["metrics"]
        if metric["type"] == "External"
    }
    assert (
        asked
        == served
        == {
            "brainhands_wake_backlog",
            "brainhands_wake_age",
            "brainhands_dispatch_demand",
            "brainhands_dispatch_age",
        }
    )


def _secret_references(node: object) -> list[str]:
    """The Secret names a manifest refers to (volumes, projected sources, env)."""
    if isinstance(node, dict):
        found = [str(node["secretName"])] if "secretName" in node else []
        for key in ("secret", "secretKeyRef"):
            if isinstance(node.get(key), dict) and "name" in node[key]:
                found.append(str(node[key]["name"]))
        return found + [ref for value in node.values() for ref in _secret_references(value)]
    if isinstance(node, list):
        return [ref for value in node for ref in _secret_references(value)]
    return []


def test_the_own_agent_overlay_carries_your_code_image_plugins_and_tools() -> None:
    """docs/deploy-own-agent.md on Kubernetes: every service runs the image with the
    user's package, the Brains load its plugin and sandboxed tool from the ConfigMap,
    and the init job registers (every engine pulls) its tool image."""
    found = documents("own-agent")
    maps = {doc["metadata"]["name"]: doc for doc in found if doc["kind"] == "ConfigMap"}
    settings = next(doc["data"] for name, doc in maps.items() if "tools" not in name)
    tools = next(doc["data"] for name, doc in maps.items() if "tools" in name)
    assert settings["brain-plugins"] == "greeter.tasks:plugin"
    assert settings["brain-sandboxed"] == "letter_count"
    assert "greeter/letter-count:1" in tools["tools.json"]
    assert "greeter/letter-count:1" in tools["images.txt"]
    images = {
        container["image"]
        for doc in found
        if doc["kind"] in {"Deployment", "Job"}
        for container in doc["spec"]["template"]["spec"]["containers"]
        if container["name"] != "engine"
    }
    assert images == {"registry.example.com/brainhands/service-plugins:0.1.0"}
    brain = next(
        doc for doc in found if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "brain"
    )
    env = {item["name"]: item for item in brain["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["BH_BRAIN_PLUGINS"]["valueFrom"]["configMapKeyRef"]["key"] == "brain-plugins"
