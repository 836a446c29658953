"""What each host knows that monitoring needs, read once (playbooks/monitoring.yaml) into a HostView.

The playbook reads, read-only: the server's state (vllm_status), its launch record (models, served name, bind
address), its last speed record (per-load verdicts, k, when) and the inventory's monitoring settings
(roles/common/defaults.yaml). What a host returned is data: it becomes label values and numbers in YAML, never a
path, a command or a template on the control node. The inventory's own word wins over the host's (the served name).
"""

from __future__ import annotations

import base64
import importlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from dflash_host.speed.state import TOOL_TAG
from dflash_host.vllm.cluster import is_headless
from dfp_cli.monitoring.loads import LosingBand, losing_bands, verdicts_of
from engine.errors import UserError

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SNAPSHOT_RE = re.compile(r"/snapshots/([0-9a-f]{40})(?:/|$)")
LOOPBACK = ("127.", "::1", "localhost")
FLEET_WIDE = ("monitoring_window", "monitoring_for", "monitoring_scrape_interval")  # one of each per Prometheus


@dataclass
class HostView:
    name: str
    group: str
    address: str  # where Prometheus reaches the host (no port)
    vllm_port: int
    node_exporter_port: int
    gpu_exporter_port: int | None
    settings: dict  # the inventory's monitoring settings, as the playbook rendered them
    served_model: str | None = None
    target_commit: str | None = None
    drafter_commit: str | None = None
    serves_http: bool = True  # False: a headless node of a multi-node server (its head answers for it)
    k: int | None = None
    measured_at_utc: str | None = None
    bands: list[LosingBand] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def labels(self) -> dict[str, str]:
        """The labels every target of the host carries; unknown ones are left out (an empty label is no label)."""
        out = {"host": self.name, "group": self.group, "served_model": self.served_model,
               "target_commit": self.target_commit, "drafter_commit": self.drafter_commit}
        return {k: str(v) for k, v in out.items() if v}

    def floor(self, name: str) -> float | None:
        """A numeric setting (a floor or a ceiling); None when the inventory leaves it unset."""
        value = self.settings.get(name)
        if value is None or value == "":
            return None
        try:
            return float(value)
        except (TypeError, ValueError):
            raise UserError(f"{self.name}: {name} is {value!r}; give a number (or null to leave it unchecked)") from None

    def gpu_free_mib(self) -> float:
        """MiB above which a GPU counts as held: gpu-cleanup's gpu_free_threshold_mib, its default where unset."""
        given = self.floor("gpu_free_threshold_mib")
        if given is not None:
            return given
        # the one place that default is written; a task module, imported by name as the engine does (not type-checked)
        spec = importlib.import_module("library.gpu_cleanup").ARGS["threshold_mib"]
        return float(spec["default"])

    def min_mean_acceptance_length(self) -> float | None:
        """The inventory's floor, else 1 + min_acceptance_rate x k (the last recorded k): what the rate floor means
        in tokens per target step."""
        given = self.floor("min_mean_acceptance_length")
        rate = self.floor("min_acceptance_rate")
        if given is not None or rate is None or not self.k:
            return given
        return round(1 + rate * self.k, 3)


def parsed_json(result: Any) -> dict:
    """A `slurp` task's file as a JSON object ({} when the file is missing or is not a JSON object)."""
    if not isinstance(result, dict) or result.get("failed") or result.get("encoding") != "base64":
        return {}
    try:
        data = json.loads(base64.b64decode(str(result.get("content") or ""), validate=True))
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def commit_of(model: Any, revision: Any) -> str | None:
    """The commit a model is served at: the inventory's revision when it is a commit, else the Hub cache's
    snapshot folder the launch runs from (…/snapshots/<commit>); None for a plain folder."""
    if isinstance(revision, str) and COMMIT_RE.match(revision):
        return revision
    found = SNAPSHOT_RE.search(str(model.get("path") or "")) if isinstance(model, dict) else None
    return found.group(1) if found else None


def address_of(settings: dict) -> str:
    """Where Prometheus reaches the host: the inventory's ansible_host (127.0.0.1 for a local-connection host).
    The inventory's word, not the host's: a host's answer never picks what the control node's config points at."""
    return "127.0.0.1" if settings.get("local") else str(settings.get("address"))


def _port(value: Any, name: str, host: str, required: bool = True) -> int | None:
    """A port setting as a number (None when unset and not required); anything else is the inventory's mistake."""
    if (value is None or value == "") and not required:
        return None
    if isinstance(value, bool) or not str(value).isdigit() or not 0 < int(value) < 65536:
        raise UserError(f"{host}: {name} is {value!r}; give a TCP port (1-65535)")
    return int(value)


def _record_facts(view: HostView, record: dict) -> None:
    """k, when, and the losing load bands from the host's last speed record."""
    if record and record.get("tool") != TOOL_TAG:
        view.notes.append("its speed record file is not the tool's (no tag): not read")
        record = {}
    last: dict = record["last"] if isinstance(record.get("last"), dict) else {}
    if not last:
        view.notes.append("no speed record yet (`invoke serving-bench --compare-baseline` or `invoke tune` makes one): "
                          "no per-load drafter alert for it")
        return
    k = last.get("num_speculative_tokens")
    if view.k is None and isinstance(k, int) and not isinstance(k, bool):
        view.k = k  # the running launch's k, where it has one, wins
    view.measured_at_utc = str(last.get("measured_at_utc") or "") or None
    verdicts = verdicts_of(last)
    view.bands = losing_bands(verdicts)
    if not verdicts:
        view.notes.append("its speed record has no per-load verdict (measured without the baseline): "
                          "`invoke serving-bench --compare-baseline` measures them")


def _launch_k(launch: dict) -> int | None:
    """k of the running launch (its speculative config), None without a drafter or a launch."""
    spec = launch.get("speculative")
    k = spec.get("num_speculative_tokens") if isinstance(spec, dict) else None
    return k if isinstance(k, int) and not isinstance(k, bool) else None


def view_of(host: str, registered: dict, group: str | None) -> HostView:
    """A host's HostView from what the monitoring playbook registered for it."""
    settings = ((registered.get("monitoring_settings") or {}).get("ansible_facts") or {}).get("monitoring_view") or {}
    if not settings:
        raise UserError(f"{host}: the monitoring playbook returned no settings for it (did it fail there?)")
    launch = parsed_json(registered.get("monitoring_launch"))
    models: dict = launch["models"] if isinstance(launch.get("models"), dict) else {}
    groups = [g for g in settings.get("groups") or [] if g != "ungrouped"]
    view = HostView(
        name=host, group=group or (groups[0] if groups else "ungrouped"), address=address_of(settings),
        vllm_port=_port(settings.get("vllm_port"), "vllm_port", host) or 0,
        node_exporter_port=_port(settings.get("node_exporter_port"), "node_exporter_port", host) or 0,
        gpu_exporter_port=_port(settings.get("gpu_exporter_port"), "gpu_exporter_port", host, required=False),
        settings=settings,
        served_model=settings.get("served_model_name") or launch.get("served_model_name"),
        target_commit=commit_of(models.get("target"), settings.get("target_revision")),
        drafter_commit=commit_of(models.get("drafter"), settings.get("drafter_revision")))
    view.k = _launch_k(launch)
    if is_headless(launch):
        view.serves_http = False
        view.notes.append("a headless node of a multi-node server: no vLLM target (its head's /metrics covers it)")
    if not launch:
        view.notes.append("no launch record here (not provisioned yet): no model commit in its labels unless "
                          "target_revision / drafter_revision name one")
    elif str(launch.get("host") or "").startswith(LOOPBACK) and not settings.get("local"):  # said, not used
        view.notes.append(f"its server binds {launch['host']}: a Prometheus on another machine cannot scrape it "
                          "(set vllm_host to an address it can reach)")
    _record_facts(view, parsed_json(registered.get("monitoring_record")))
    return view


def agreed_setting(views: list[HostView], name: str, holder: str) -> object:
    """A setting `holder` reads once for the fleet (the rule file, the install): every host must agree."""
    values = {repr(v.settings.get(name)) for v in views}
    if len(values) > 1:
        said = ", ".join(f"{v.name}: {v.settings.get(name)}" for v in views)
        raise UserError(f"{name} differs between the hosts ({said}); {holder} one for the fleet: set it once, "
                        "in the group's vars or with -e")
    return views[0].settings.get(name)


def fleet_setting(views: list[HostView], name: str) -> str:
    """A duration the rule file holds once (a rate's window, an alert's `for`, the scrape interval)."""
    value = str(agreed_setting(views, name, "the rules hold"))
    if not re.fullmatch(r"([0-9]+(ms|s|m|h|d|w|y))+", value):
        raise UserError(f"{name} is {value!r}; give a Prometheus duration such as 10m or 1h30m")
    return value
