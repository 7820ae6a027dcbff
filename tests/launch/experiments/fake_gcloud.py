"""A stand-in `gcloud` for the TPU launcher's tests that refuses what the real one refuses.

Its state (TPU VMs, queued resources) lives in the JSON file $FAKE_GCLOUD_STATE; every call is appended to
$GCLOUD_LOG. Worker w of node N has the home directory $FAKE_HOMES/N/w (scp copies there and back; `~/` maps to it);
gs://B/P is the local directory $FAKE_GCS/B/P. The rules, from Google Cloud SDK 528's source
(googlecloudsdk/command_lib/compute/tpus/tpu_vm/ssh.py and exceptions.py, surface/compute/tpus/*/create.yaml) and the
TPU API's documentation:
- --worker: `all`, a number, a list or a range, each below the node's worker count (ParseWorkerFlag's messages);
  several workers need --command for ssh, and scp from the workers to this machine takes one worker only ("cannot
  target multiple workers while copying files to client"); scp to several workers with an ssh-agent that lacks
  gcloud's key fails (VerifyKeyInAgent: SSHKeyNotInAgent; here $FAKE_AGENT_HAS_KEY=1 says the agent has it).
- ssh and scp to a node in a terminal state (PREEMPTED, TERMINATED) or an unusable one (STOPPED, STOPPING, DELETING,
  HIDDEN) fail (ValidateTPUState).
- Names: creating a TPU VM or a queued resource whose name exists fails with ALREADY_EXISTS, whatever the existing
  one's state (a SUSPENDED queued resource keeps its name), and so does a queued resource whose node id is taken.
- queued-resources delete without --force succeeds only for an ACCEPTED, FAILED or SUSPENDED one or one without nodes
  (REST queuedResources.delete's `force`); with --force it deletes the node too. A missing resource is NOT_FOUND.
- --autocheckpoint-enabled exists only in the alpha track (create.yaml: release_tracks [ALPHA]).
- Flags: each command takes only the flags its reference page lists (cloud.google.com/sdk/gcloud/reference/...:
  FLAGS below) and gcloud's wide flags; any other is "unrecognized arguments" (exit 2), as gcloud's parser says.
- Queued-resource states (the v2 API's QueuedResourceState): a new one is WAITING_FOR_RESOURCES for
  $FAKE_QUEUE_WAITS describes (default 1), PROVISIONING for one, then ACTIVE with a READY node, or, when
  $FAKE_QUEUE_FAIL is set, FAILED with state.failedData.error.message = its text (every time it is queued); one a test
  sets SUSPENDING becomes SUSPENDED at the next describe, its node deleted. describe's --format=value(a.b,c) prints
  the named fields of the resource's API form, tab-separated, as gcloud does.
Commands whose text contains $FAKE_SSH_FAIL_ON exit 3 (a failing step). The start command (it writes the systemd
unit) runs for real on each worker, in bash in its home, with a sandbox sudo (/etc/... moved under the home) and a
sandbox systemctl (it records its calls in ~/systemctl.log and needs the unit file): the shell the hosts run. The
bucket probe (a command containing `write-probe`) fails with exit 7, printing the account, when $FAKE_BUCKET_READONLY
names the VMs' service account.
"""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

WORKERS = {"v4-8": 1, "v4-32": 4, "v5litepod-8": 1, "v5litepod-16": 4, "v6e-8": 1, "v6e-16": 4}
WIDE = {"account", "billing-project", "configuration", "flags-file", "flatten", "format", "help", "project", "quiet",
        "impersonate-service-account", "log-http", "trace-token", "user-output-enabled", "verbosity", "zone"}
_SSH_COMMON = {"worker", "batch-size", "dry-run", "force-key-file-overwrite", "internal-ip", "plain",
               "ssh-key-expiration", "ssh-key-expire-after", "strict-host-key-checking", "tunnel-through-iap"}
_CREATE_COMMON = {"async", "boot-disk", "data-disk", "description", "internal-ips", "labels", "metadata",
                  "metadata-from-file", "network", "range", "reserved", "scopes", "service-account",
                  "shielded-secure-boot", "spot", "subnetwork", "tags", "accelerator-type", "topology", "type"}
FLAGS = {  # The reference pages' flags (GA; the alpha track adds ALPHA_FLAGS).
    "tpu-vm create": _CREATE_COMMON | {"version", "preemptible"},
    "tpu-vm describe": set(), "tpu-vm delete": {"async"},
    "tpu-vm ssh": _SSH_COMMON | {"command", "container", "output-directory", "ssh-flag"},
    "tpu-vm scp": _SSH_COMMON | {"compress", "recurse", "scp-flag"},
    "queued-resources create": _CREATE_COMMON | {"runtime-version", "node-id", "node-count", "node-prefix",
                                                 "guaranteed", "valid-after-duration", "valid-after-time",
                                                 "valid-until-duration", "valid-until-time", "reservation-host-folder",
                                                 "reservation-host-organization", "reservation-host-project"},
    "queued-resources describe": set(), "queued-resources delete": {"async", "force"},
    "storage rsync": {"recursive", "delete-unmatched-destination-objects", "checksums-only", "dry-run"},
}
ALPHA_FLAGS = {"tpu-vm create": {"autocheckpoint-enabled"}, "queued-resources create": {"autocheckpoint-enabled"}}
UNUSABLE = ("STOPPED", "STOPPING", "DELETING", "HIDDEN")
TERMINAL = ("PREEMPTED", "TERMINATED")


def fail(command: str, message: str, code: int = 1) -> None:
  print(f"ERROR: (gcloud.{command}) {message}", file=sys.stderr)
  sys.exit(code)


def flags(argv: list[str]) -> tuple[list[str], dict[str, str]]:
  """Positional arguments and --flag[=value] options."""
  positional, options = [], {}
  for arg in argv:
    if arg.startswith("--"):
      key, _, value = arg[2:].partition("=")
      options[key] = value
    else:
      positional.append(arg)
  return positional, options


def workers(command: str, flag: str, count: int) -> list[int]:
  """ParseWorkerFlag."""
  if flag.upper() == "ALL":
    return list(range(count))
  indexes = set()
  for part in filter(None, flag.split(",")):
    if "-" in part:
      start, end = (int(x) for x in part.split("-"))
      if start >= end:
        fail(command, f'Invalid value for [--worker]: found malformed range "{part}".')
      indexes.update(range(start, end + 1))
    else:
      indexes.add(int(part))
  if not indexes:
    fail(command, "Invalid value for [--worker]: no worker specified, or none were parsed from the argument value.")
  if max(indexes) >= count:
    fail(command, f"Invalid value for [--worker]: worker index {max(indexes)} is larger than the valid worker indexes "
                  f"on this TPU VM. Please only use indexes in the range [0, {count - 1}], inclusive.")
  return sorted(indexes)


def check_flags(command: str, key: str, options: dict[str, str], alpha: bool) -> None:
  """gcloud's parser: a flag the command does not have is refused."""
  known = WIDE | FLAGS[key] | (ALPHA_FLAGS.get(key, set()) if alpha else set())
  unknown = sorted(f"--{k}" for k in options if k not in known)
  if unknown:
    fail(command, f"unrecognized arguments: {' '.join(unknown)}", 2)


def render(resource: dict, fmt: str) -> str:
  """--format=value(a.b,c): the fields, tab-separated (a missing one empty)."""
  fields = fmt.removeprefix("value(").removesuffix(")").split(",")

  def get(path: str) -> str:
    value: object = resource
    for part in path.split("."):
      value = value.get(part, "") if isinstance(value, dict) else ""
    return str(value)
  return "\t".join(get(f.strip()) for f in fields)


def usable(command: str, node: dict) -> None:
  """ValidateTPUState."""
  if node["state"] in TERMINAL:
    fail(command, f'This TPU has terminal state "{node["state"]}", so it cannot be used anymore.')
  if node["state"] in UNUSABLE:
    fail(command, f'This TPU has state "{node["state"]}", so it cannot be currently connected to.')


def advance(resource: dict, name: str, nodes: dict) -> None:
  """One describe's worth of a queued resource's life (module docstring)."""
  if resource["state"] == "WAITING_FOR_RESOURCES":
    resource["waits"] -= 1
    if resource["waits"] < 0:
      resource["state"] = "PROVISIONING"
  elif resource["state"] == "PROVISIONING":
    if os.environ.get("FAKE_QUEUE_FAIL"):
      resource["state"], resource["error"] = "FAILED", os.environ["FAKE_QUEUE_FAIL"]
    else:
      resource["state"] = "ACTIVE"
      nodes[resource["node"]] = {"state": "READY", "type": resource["type"], "queued": name}
  elif resource["state"] == "SUSPENDING":
    resource["state"] = "SUSPENDED"
    nodes.pop(resource["node"], None)


UNIT = "encoderlab"
SUDO = """#!/bin/bash
# The sandbox's sudo: runs its command with every /etc/... argument moved under $HOME/etc.
args=()
for a in "$@"; do case "$a" in /etc/*) args+=("$HOME$a");; *) args+=("$a");; esac; done
exec "${args[@]}"
"""
SYSTEMCTL = """#!/bin/bash
# The sandbox's systemctl: records its arguments; enable and restart need the unit file.
echo "$*" >> "$HOME/systemctl.log"
unit="${@: -1}"
case "$1" in daemon-reload) exit 0;; esac
test -f "$HOME/etc/systemd/system/$unit.service" || { echo "Failed to $1 $unit.service: Unit not found." >&2; exit 5; }
"""


def start(command: str, name: str, worker: int, text: str) -> None:
  """The start command on a worker, run by bash in its sandbox home (sudo and systemctl the sandbox's own, above);
  a failure is the command's, as over ssh."""
  sandbox = home(name, worker)
  tools = sandbox / ".fake-bin"
  tools.mkdir(exist_ok=True)
  for tool, script in (("sudo", SUDO), ("systemctl", SYSTEMCTL)):
    (tools / tool).write_text(script)
    (tools / tool).chmod(0o755)
  (sandbox / "etc" / "systemd" / "system").mkdir(parents=True, exist_ok=True)
  env = os.environ | {"HOME": str(sandbox), "PATH": f"{tools}:{os.environ['PATH']}"}
  ran = subprocess.run(["bash", "-c", text], env=env, cwd=sandbox, capture_output=True, text=True, check=False)
  print(ran.stdout, end="")
  if ran.returncode:
    print(ran.stderr, file=sys.stderr, end="")
    sys.exit(ran.returncode)


def home(name: str, worker: int) -> Path:
  path = Path(os.environ["FAKE_HOMES"]) / name / str(worker)
  path.mkdir(parents=True, exist_ok=True)
  return path


def local(path: str, name: str, worker: int) -> Path:
  """A worker's path (`~/x` or `/x`) in its fake home."""
  return home(name, worker) / path.removeprefix("~/").lstrip("/")


def copy(source: Path, destination: Path, recurse: bool) -> None:
  matched = sorted(source.parent.glob(source.name)) if "*" in source.name else [source]
  if not matched or not matched[0].exists():
    print(f"scp: {source}: No such file or directory", file=sys.stderr)
    sys.exit(1)
  for found in matched:
    target = destination / found.name if destination.is_dir() else destination
    if found.is_dir():
      if not recurse:
        fail("compute.tpus.tpu-vm.scp", f"{found} is a directory; use --recurse")
      shutil.copytree(found, target, dirs_exist_ok=True)
    else:
      target.parent.mkdir(parents=True, exist_ok=True)
      shutil.copy(found, target)


def main(argv: list[str]) -> None:
  with open(os.environ["GCLOUD_LOG"], "a", encoding="utf-8") as log:
    log.write(shlex.join(argv) + "\n")
  state_file = Path(os.environ["FAKE_GCLOUD_STATE"])
  state = json.loads(state_file.read_text()) if state_file.is_file() else {"nodes": {}, "queued": {}}
  alpha = argv[:1] == ["alpha"]
  argv = argv[1:] if alpha else argv
  if argv[:2] == ["storage", "rsync"]:
    positional, options = flags(argv[2:])
    check_flags("storage.rsync", "storage rsync", options, alpha)
    source = Path(os.environ["FAKE_GCS"]) / positional[0].removeprefix("gs://")
    if not source.is_dir():
      fail("storage.rsync", f"The following URLs matched no objects or files: {positional[0]}")
    shutil.copytree(source, positional[1], dirs_exist_ok=True)
    return
  assert argv[:2] == ["compute", "tpus"], argv
  group, verb = argv[2], argv[3]
  command = f"{'alpha.' if alpha else ''}compute.tpus.{group}.{verb}"
  positional, options = flags(argv[4:])
  check_flags(command, f"{group} {verb}", options, alpha)
  name = positional[0]
  if verb == "scp":  # The node is named by the remote side: NAME:path.
    name = next(p.split(":", 1)[0] for p in positional if ":" in p)
  nodes, queued = state["nodes"], state["queued"]
  if group == "queued-resources":
    resource = queued.get(name)
    if verb == "create":
      if resource is not None or options["node-id"] in nodes:
        fail(command, f"ALREADY_EXISTS: Resource '{name if resource else options['node-id']}' already exists")
      queued[name] = {"state": "WAITING_FOR_RESOURCES", "node": options["node-id"],
                      "type": options["accelerator-type"], "waits": int(os.environ.get("FAKE_QUEUE_WAITS", "1")),
                      "spot": "spot" in options, "autocheckpoint": "autocheckpoint-enabled" in options}
    elif resource is None:
      fail(command, f"NOT_FOUND: Resource 'projects/p/locations/z/queuedResources/{name}' was not found")
    elif verb == "describe":
      advance(resource, name, nodes)
      view = {"state": {"state": resource["state"]} | (
          {"failedData": {"error": {"code": 9, "message": resource["error"]}}} if resource.get("error") else {})}
      print(render(view, options.get("format", "value(state.state)")))
    elif verb == "delete":
      if "force" not in options and resource["state"] not in ("ACCEPTED", "FAILED", "SUSPENDED") \
          and resource["node"] in nodes:
        fail(command, "FAILED_PRECONDITION: the queued resource has nodes; delete them first or use --force")
      nodes.pop(resource["node"], None)
      del queued[name]
  else:
    node = nodes.get(name)
    if verb == "create":
      if node is not None:
        fail(command, f"ALREADY_EXISTS: Resource 'projects/p/locations/z/nodes/{name}' already exists")
      nodes[name] = {"state": "READY", "type": options["accelerator-type"], "queued": None, "spot": "spot" in options,
                     "autocheckpoint": "autocheckpoint-enabled" in options}
    elif node is None:
      fail(command, f"NOT_FOUND: Resource 'projects/p/locations/z/nodes/{name}' was not found")
    elif verb == "describe":
      print(render({"state": node["state"], "acceleratorType": node["type"]},
                   options.get("format", "value(state,acceleratorType)")))
    elif verb == "delete":
      del nodes[name]
    elif verb in ("ssh", "scp"):
      usable(command, node)
      count = WORKERS[node["type"]]
      chosen = workers(command, options.get("worker", "0"), count)
      if verb == "ssh":
        if len(chosen) > 1 and "command" not in options:
          fail(command, "Invalid value for [--worker]: cannot target multiple workers without the `--command` flag.")
        if os.environ.get("FAKE_SSH_FAIL_ON") and os.environ["FAKE_SSH_FAIL_ON"] in options.get("command", ""):
          sys.exit(3)
        if os.environ.get("FAKE_BUCKET_READONLY") and "write-probe" in options.get("command", ""):
          print(f"cannot write as {os.environ['FAKE_BUCKET_READONLY']}")
          sys.exit(7)
        if f"/etc/systemd/system/{UNIT}.service" in options.get("command", ""):
          for worker in chosen:
            start(command, name, worker, options["command"])
      else:
        source, destination = positional[0], positional[1]
        from_workers = source.startswith(f"{name}:")
        if len(chosen) > 1 and from_workers:
          fail(command, "Invalid value for [--worker]: cannot target multiple workers while copying files to client.")
        if len(chosen) > 1 and os.environ.get("SSH_AUTH_SOCK") and os.environ.get("FAKE_AGENT_HAS_KEY") != "1":
          fail(command, 'SSH Key is not present in the SSH agent. Please run "ssh-add '
                        f'{Path.home()}/.ssh/google_compute_engine" to add it, and try again.')
        for worker in chosen:
          if from_workers:
            copy(local(source.split(":", 1)[1], name, worker), Path(destination), "recurse" in options)
          else:
            copy(Path(source), local(destination.split(":", 1)[1], name, worker), "recurse" in options)
    else:
      raise AssertionError(f"the fake does not know {argv}")
  state_file.write_text(json.dumps(state, indent=1))


if __name__ == "__main__":
  main(sys.argv[1:])
