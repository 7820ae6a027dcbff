"""A Cloud TPU slice's lifecycle through gcloud: find it, reuse, wait for, recreate or create it; delete it.

Rules from Google's docs and gcloud's source (Google Cloud SDK 528, googlecloudsdk/...):
- Queued resources (cloud.google.com/tpu/docs/queued-resources; states: the v2 API's QueuedResourceState) pass
  through ACCEPTED / WAITING_FOR_RESOURCES / PROVISIONING / CREATING to ACTIVE; a preempted Spot one goes
  SUSPENDING -> SUSPENDED ("the resources ... have been deleted", no longer eligible for allocation) and a refused
  one to FAILED (its reason in state.failedData.error). Neither comes back: it is deleted (`queued-resources delete
  --force --quiet`; without --force the API deletes only one whose nodes are gone or that is ACCEPTED, FAILED or
  SUSPENDED: REST queuedResources.delete) and created again; a FAILED one at most --max_requeues times, its reason
  printed each time; past that the launch stops with the reason on its last line and keeps the resource to inspect.
  A SUSPENDED or FAILED one still holds its name (a create with the same name clashes) and its quota.
- A node (TPU VM) is READY when usable; PREEMPTED or TERMINATED is terminal (command_lib/compute/tpus/tpu_vm/ssh.py
  ValidateTPUState refuses ssh/scp to it: TPUInUnusableTerminalState), so it is deleted and created again;
  CREATING, STARTING, RESTARTING, REPAIRING are waited for; STOPPED, STOPPING, DELETING, HIDDEN, HIDING are refused
  with a line naming the state.
- `--autocheckpoint-enabled` exists only in the ALPHA track of `tpu-vm create` and `queued-resources create`
  (surface/compute/tpus/*/create.yaml: release_tracks [ALPHA]), so those creates run as `gcloud alpha`.
- A missing resource's describe fails with NOT_FOUND; any other failure (no credentials, a wrong project) is an
  error showing gcloud's own last line.
"""

import argparse
import shlex
import subprocess
import time
from collections.abc import Callable

from encoder import errors
from launch.experiments import tpu_types

WAIT_QUEUED = {"CREATING", "ACCEPTED", "WAITING_FOR_RESOURCES", "PROVISIONING", "SUSPENDING", "DELETING"}
DEAD_QUEUED = {"SUSPENDED", "FAILED"}
WAIT_NODE = {"CREATING", "STARTING", "RESTARTING", "REPAIRING"}
DEAD_NODE = {"PREEMPTED", "TERMINATED"}

Runner = Callable[[str, list[str], bool], subprocess.CompletedProcess]


def gcloud(args: argparse.Namespace, *command: str, alpha: bool = False) -> list[str]:
  """`gcloud [alpha] compute tpus <command> --zone=Z [--project=P]`."""
  project = [f"--project={args.project}"] if args.project else []
  return ["gcloud", *(["alpha"] if alpha else []), "compute", "tpus", *command, f"--zone={args.zone}", *project]


def commands(args: argparse.Namespace) -> dict[str, list[str]]:
  """Every gcloud command the lifecycle may run for `args` (name, zone, project, type, version, spot, queued,
  autocheckpoint), by what it does."""
  kind = tpu_types.slice_type(args.type)
  version = args.version or kind.runtime
  spot = ["--spot"] if args.spot else []
  autocheckpoint = ["--autocheckpoint-enabled"] if args.autocheckpoint else []
  out = {"describe node": gcloud(args, "tpu-vm", "describe", args.name, "--format=value(state,acceleratorType)")}
  if args.queued:
    out |= {"describe queued resource": gcloud(args, "queued-resources", "describe", args.name,
                                               "--format=value(state.state,state.failedData.error.message)"),
            "create": gcloud(args, "queued-resources", "create", args.name, f"--node-id={args.name}",
                             f"--accelerator-type={kind.name}", f"--runtime-version={version}", *spot,
                             *autocheckpoint, alpha=args.autocheckpoint),
            "delete": gcloud(args, "queued-resources", "delete", args.name, "--force", "--quiet")}
  else:
    out |= {"create": gcloud(args, "tpu-vm", "create", args.name, f"--accelerator-type={kind.name}",
                             f"--version={version}", *spot, *autocheckpoint, alpha=args.autocheckpoint),
            "delete": gcloud(args, "tpu-vm", "delete", args.name, "--quiet")}
  return out


def _describe(run: Runner, what: str, argv: list[str]) -> list[str] | None:
  """The describe's output fields, None when the resource does not exist; another failure is an error."""
  found = run(what, argv, True)
  if found.returncode == 0:
    return found.stdout.rstrip("\n").split("\t")  # value(): the fields tab-separated (a message has spaces).
  if "NOT_FOUND" in found.stderr:
    return None
  last = (found.stderr.strip().splitlines() or [f"exit {found.returncode}"])[-1]
  raise errors.UserError(f"{shlex.join(argv[:5])}: gcloud failed: {last}")


def _checked(run: Runner, what: str, argv: list[str]) -> None:
  result = run(what, argv, False)
  if result.returncode != 0:
    raise errors.UserError(f"step '{what}' failed (exit {result.returncode}): {shlex.join(argv)}")


def _node_usable(args: argparse.Namespace, fields: list[str]) -> bool:
  """Whether a described node (state, type) can be used as it is; refuses another type or an unusable state."""
  state, kind = (fields + ["", ""])[:2]
  wanted = tpu_types.slice_type(args.type).name
  if kind != wanted:
    raise errors.UserError(f"--name {args.name}: the slice exists as {kind or 'an unknown type'}, not {wanted}; "
                           "delete it (--delete) or choose another --name")
  if state in DEAD_NODE or state in WAIT_NODE or state == "READY":
    return state == "READY"
  raise errors.UserError(f"--name {args.name}: the slice is {state or 'in an unknown state'}, not READY; start it "
                         f"(gcloud compute tpus tpu-vm start {args.name}) or delete it (--delete)")


def ensure(args: argparse.Namespace, run: Runner, sleep: Callable[[float], None] = time.sleep) -> None:
  """Leaves a READY slice of --type named --name: reuses one, waits for one on its way, deletes a preempted or
  failed one (and its queued resource) and creates it again, creates a missing one (queued: waits until ACTIVE)."""
  cmd = commands(args)
  failures = 0
  while True:
    if args.queued:
      found = _describe(run, "find the queued resource", cmd["describe queued resource"])
      state = found[0] if found else None
      if state == "FAILED":
        failures += 1
        reason = (found[1] if found and len(found) > 1 else "") or "(no failedData.error message)"
        if failures > args.max_requeues:
          raise errors.UserError(f"queued resource {args.name} FAILED {failures} time(s), over --max_requeues="
                                 f"{args.max_requeues}; it is kept for `gcloud compute tpus queued-resources "
                                 f"describe {args.name}`; the reason: {reason}")
        print(f"# queued resource {args.name} FAILED: {reason}; deleting and queueing it again (re-queue {failures} "
              f"of --max_requeues={args.max_requeues})", flush=True)
        _checked(run, "delete the failed queued resource", cmd["delete"])
        continue
      if state in DEAD_QUEUED:
        print(f"# queued resource {args.name} is {state}: it no longer allocates; deleting and queueing it again",
              flush=True)
        _checked(run, "delete the queued resource (and its node)", cmd["delete"])
        continue
      if state in WAIT_QUEUED:
        print(f"# queued resource {args.name} is {state}; waiting {args.poll_s:g} s", flush=True)
        sleep(args.poll_s)
        continue
      if state is None:
        if _describe(run, "check the name is free", cmd["describe node"]) is not None:
          raise errors.UserError(f"--name {args.name}: a TPU VM of that name exists outside a queued resource; "
                                 "launch it without --queued, delete it, or choose another --name")
        _checked(run, "queue the slice", cmd["create"])
        continue
      node = _describe(run, "find the slice", cmd["describe node"])  # ACTIVE (or an unknown state): its node.
      if node is not None and _node_usable(args, node):
        print(f"# reusing {args.name}: queued resource {state}, node READY", flush=True)
        return
      if node is None or node[0] in DEAD_NODE:
        _checked(run, "delete the queued resource (its node is gone)", cmd["delete"])
        continue
    else:
      node = _describe(run, "find the slice", cmd["describe node"])
      if node is None:
        _checked(run, "create the slice", cmd["create"])
        continue
      if _node_usable(args, node):
        print(f"# reusing {args.name}: READY, {node[1]}", flush=True)
        return
      if node[0] in DEAD_NODE:
        print(f"# {args.name} is {node[0]}: deleting and creating it again", flush=True)
        _checked(run, "delete the preempted slice", cmd["delete"])
        continue
    print(f"# {args.name} is {node[0]}; waiting {args.poll_s:g} s", flush=True)
    sleep(args.poll_s)


def delete(args: argparse.Namespace, run: Runner) -> None:
  """Deletes the slice (with --queued its queued resource and node); a missing one is left as it is."""
  cmd = commands(args)
  key = "describe queued resource" if args.queued else "describe node"
  if _describe(run, f"find the {'queued resource' if args.queued else 'slice'}", cmd[key]) is None:
    print(f"# {args.name}: nothing to delete", flush=True)
    return
  _checked(run, "delete the queued resource and its node" if args.queued else "delete the slice", cmd["delete"])


def delete_command(args: argparse.Namespace) -> list[str]:
  """What a worker runs to delete its own slice when the run ends (--delete_when_done): asynchronous, since deleting
  the slice ends the machine that asks."""
  return [*commands(args)["delete"], "--async"]
