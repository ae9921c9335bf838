"""Reads the Compose and Kubernetes samples of docs/DEPLOY.md, checks what they
must say, and writes the Compose sample's two services as shell variables for
check-deb.sh, which runs them in the clean root the image's commands installed.

    python deploy_samples.py DEPLOY.md OUT.sh

Checks: both samples parse (YAML); the image is the repository's Dockerfile (Compose
`build: .`); the recorder encodes (`--encode`) onto a volume that is not memory
(no tmpfs, no emptyDir); both samples run the same commands as the same users. The
camera's `--seconds 3600` becomes 3 for the run."""

from __future__ import annotations

import re
import sys

import yaml


def arg_after(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def uid(service: dict) -> list[str]:
    """A Compose service's `user: "UID:GID"`."""
    return str(service["user"]).split(":")


def main() -> None:
    doc, out = sys.argv[1], sys.argv[2]
    with open(doc) as f:
        text = f.read()
    blocks = [
        yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", text, re.DOTALL)
    ]
    compose = next(b for b in blocks if isinstance(b, dict) and "services" in b)
    pod = next(b for b in blocks if isinstance(b, dict) and b.get("kind") == "Pod")
    rec, cam = compose["services"]["recorder"], compose["services"]["camera"]
    assert rec["build"] == "." and cam["build"] == ".", "the image is the Dockerfile's"
    for cmd in (rec["command"], cam["command"]):
        assert all(isinstance(a, str) and a and not re.search(r"\s", a) for a in cmd), (
            cmd
        )
    assert "--encode" in rec["command"], (
        "the recorder must encode, not fill a volume with raw video"
    )
    rec_dir = arg_after(rec["command"], "--out")
    # The recordings' volume is on disk: no tmpfs driver.
    volumes = compose.get("volumes") or {}
    for v in rec["volumes"]:
        name, path = v.split(":")[:2]
        if path == rec_dir:
            opts = (volumes.get(name) or {}).get("driver_opts") or {}
            assert opts.get("type") != "tmpfs", f"volume {name} for {rec_dir} is tmpfs"
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert containers["recorder"]["command"] == rec["command"]
    assert containers["camera"]["command"] == cam["command"]
    pod_volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    for m in containers["recorder"]["volumeMounts"]:
        if m["mountPath"] == rec_dir:
            assert "emptyDir" not in pod_volumes[m["name"]], (
                "the recordings' volume is emptyDir"
            )
    assert containers["recorder"]["securityContext"]["runAsUser"] == int(uid(rec)[0])
    assert containers["camera"]["securityContext"]["runAsUser"] == int(uid(cam)[0])
    camera = list(cam["command"])
    camera[camera.index("--seconds") + 1] = "3"
    with open(out, "w") as f:
        f.write(f"recorder_uid={uid(rec)[0]} recorder_gid={uid(rec)[1]}\n")
        f.write(f"camera_uid={uid(cam)[0]} camera_gid={uid(cam)[1]}\n")
        f.write(f"recorder_cmd='{' '.join(rec['command'])}'\n")
        f.write(f"camera_cmd='{' '.join(camera)}'\n")
        f.write(f"socket={arg_after(rec['command'], '--listen')}\n")
        f.write(f"rec_dir={rec_dir}\n")


if __name__ == "__main__":
    main()
