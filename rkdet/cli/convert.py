"""`rkdet convert`: parse, call the pipeline (or, with --search, the search over remedies), print a summary.

It sits above both `convert` and `search` (as cli/deploy.py sits above deploy and history): `--search`
needs the per-layer analysis (`rkdet.layers`) to pick the layers a hybrid build keeps in float16.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from rich.console import Console

from rkdet.config import PLATFORMS, RkdetConfig, load_config
from rkdet.errors import ConversionError, FidelityGateError, InputError
from rkdet.log import log_console


@click.command("convert")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default="configs/yolov8.yaml",
              show_default=True, help="YAML config file.")
@click.option("--out", type=click.Path(path_type=Path), default=Path("build"), show_default=True,
              help="Folder that receives <name>-<platform>/ build folders.")
@click.option("--target", "targets", multiple=True, type=click.Choice(PLATFORMS, case_sensitive=False),
              help="Build only this platform (repeatable); default: target.platforms from the config.")
@click.option("--verify", is_flag=True, help="Rebuild and report byte identity and fingerprint identity separately.")
@click.option("--keep-failed", is_flag=True, help="Keep a failed build's folder (with toolkit.log) as <name>.failed.")
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable summary on stdout.")
@click.option("--force", is_flag=True,
              help="Replace an existing build folder that holds a build of another fingerprint (refused otherwise).")
@click.option("--search", is_flag=True,
              help="Try the documented remedies in order (algorithm, method, calibration subset, float16 for the worst "
                   "layers) until one passes every fidelity gate; write search.json and <config>.searched.yaml.")
@click.option("--search-all", is_flag=True, help="With --search: try every variant (the first passing one is installed).")
@click.option("--check-against", "check_against", type=click.Path(path_type=Path), default=None, metavar="BUILD",
              help="Rebuild the config here (hermetically, nothing installed) and say whether BUILD (a colleague's or "
                   "CI's build folder) is the same model: exit 0 same, 1 names the first difference, 2 bad BUILD.")
@click.option("--search-space", "search_space", multiple=True, metavar="DIM=V1,V2",
              help="With --search: narrow one dimension (algorithm, method, calibration divisors 1/2/4, hybrid k or "
                   "none); repeatable.")
@click.option("--search-budget", "search_budget", metavar="DURATION", default=None,
              help="With --search: stop after this long (20m, 1h30m, 90s; default 20m, a coffee break), cheapest "
                   "variants first; exit 4 with the how-close table and what was left untried.")
@click.option("--toolkit", "toolkit", default=None, metavar="V[,V2...]",
              help="Build with rknn-toolkit2 V in its pinned environment (config toolkit.version; created on first "
                   "use). Several: one build per version, under <out>/toolkit-<V>/.")
def convert_command(config_path: Path, out: Path, targets: tuple[str, ...], verify: bool, keep_failed: bool,
                    as_json: bool, force: bool, search: bool, search_all: bool, search_space: tuple[str, ...],
                    search_budget: str | None, check_against: Path | None, toolkit: str | None) -> None:
    """Convert ONNX to RKNN with static INT8 calibration, golden data and a manifest.

    Exit codes: 0 ok (--search: a variant passes), 2 bad input or config, 4 conversion failed
    (--search: no variant passes every gate; search.json says how close each came); with several
    --toolkit versions, 1 when the builds differ (rkdet compare-builds: reports in --out).
    """
    from rkdet.convert.pipeline import convert

    if (search_all or search_space or search_budget) and not search:
        raise InputError("--search-all, --search-space and --search-budget go with --search")
    budget_seconds = None
    if search:
        from rkdet.search.budget import DEFAULT_BUDGET, parse_duration

        budget_seconds = parse_duration(search_budget or DEFAULT_BUDGET)  # a bad value: exit 2 before any work
    console = log_console()
    if check_against is not None and (search or verify or keep_failed or targets or force):
        raise InputError("--check-against rebuilds BUILD's own platform and installs nothing: it does not go with "
                         "--search, --verify, --keep-failed, --target or --force")
    cfg = load_config(config_path)
    if check_against is not None:
        _check(cfg, check_against, as_json, console)
        return
    versions = [v.strip() for v in (toolkit or "").split(",") if v.strip()]
    if toolkit is not None and not versions:
        raise InputError(f"--toolkit {toolkit!r}: give a version, e.g. 2.3.2, or several: 2.3.2,2.5.0")
    if len(versions) > 1:
        if search:
            raise InputError("--toolkit with several versions builds each once; run --search per version")
        return _matrix(cfg, config_path, out, targets, versions, verify, keep_failed, as_json, console)
    if versions:
        from rkdet.convert.toolkit_env import pinned_sha256

        pinned_sha256(versions[0])  # an unpinned version: one line, exit 2, before anything is built
        cfg = cfg.model_copy(update={"toolkit": cfg.toolkit.model_copy(update={"version": versions[0]})})
    if search:
        if verify or keep_failed:
            raise InputError("--search builds and removes its own variants: run --verify (or --keep-failed) on "
                             "the searched config afterwards")
        from rkdet.search.budget import Budget
        from rkdet.cli.search import run_search

        assert budget_seconds is not None
        budget = Budget(budget_seconds)
        run_search(cfg, config_path, out, [t.lower() for t in targets], search_all, search_space, as_json, console,
                   budget)
        return
    try:
        with console.status("converting") as status:
            from rkdet.convert.hermetic import BuildWatch

            head = [""]

            def step(msg: str) -> None:
                head[0] = msg
                status.update(msg)
                console.log(msg)

            watch = BuildWatch(progress=lambda line: status.update(f"{head[0]} | {line}"))
            results = convert(cfg, out, [t.lower() for t in targets] or None, verify=verify, keep_failed=keep_failed,
                              progress=step, watch=watch, force=force)
    except ConversionError as err:  # a failed build says the warnings a passing one prints
        for w in err.warnings:
            console.print(f"[yellow]warning[/]: {escape(w)}", soft_wrap=True, highlight=False)
        if not isinstance(err, FidelityGateError):
            raise
        for line in err.details:  # the whole fidelity line (every output, the worst named), where fidelity.json is
            console.print(line, markup=False, highlight=False, soft_wrap=True)
        raise FidelityGateError(f"{err}; to see which layer loses it: rkdet layers --config {config_path}; to look "
                                f"for a remedy that passes: rkdet convert --config {config_path} --search") from None
    summary = []
    for r in results:
        for w in r.warnings:  # one line each (no wrapping), model-supplied names never read as markup
            console.print(f"[yellow]warning[/]: {escape(w)}", soft_wrap=True, highlight=False)
        if r.fidelity_line:
            console.print(r.fidelity_line, markup=False, highlight=False, soft_wrap=True)
        entry = {"platform": r.platform, "fidelity": r.fidelity_line, "folder": str(r.folder), "fingerprint": r.fingerprint,
                 "rknn_sha256": r.rknn_sha256, "warnings": r.warnings}
        if r.verify is not None:
            entry["verify"] = r.verify
        summary.append(entry)
        line = f"[green]built[/] {r.folder}  fingerprint {r.fingerprint[:16]}"
        if r.verify is not None:
            line += (f"  verify: bytes {'identical' if r.verify['rknn_bytes_identical'] else 'DIFFER'},"
                     f" fingerprint {'identical' if r.verify['fingerprint_identical'] else 'DIFFERS'}")
        console.print(line)
    if as_json:
        click.echo(json.dumps({"schema": "rkdet.convert/1", "builds": summary}, indent=2, sort_keys=True))


def _check(cfg: RkdetConfig, build: Path, as_json: bool, console: Console) -> None:
    """`--check-against BUILD`: the verdict on stdout (one line, or --json), progress on stderr; exit 0 or 1."""
    from rkdet.convert.check import check_against
    from rkdet.errors import EXIT_DIFFERENT
    from rkdet.textsafe import visible

    with console.status("checking") as status:
        report = check_against(cfg, build, progress=lambda msg: (status.update(msg), console.log(msg)))
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        fp = report.model_fingerprint
        if report.same:
            click.echo(f"same model: {visible(build)} ({report.platform}) is what this config builds here: model "
                       f"fingerprint {fp[1][:16]}, build fingerprint {str(report.build_fingerprint[1])[:16]}")
        else:
            first = report.differences[0]
            more = len(report.differences) - 1
            click.echo(f"differs: {visible(build)} ({report.platform}) vs here: {visible(first.detail, 300)}"
                       + (f" (and {more} more difference{'s' if more > 1 else ''})" if more else "")
                       + ("; the model itself is the same (model and .rknn content fingerprints match)"
                          if report.same_model else ""))
            click.echo(f"model fingerprint {fp[0][:16]} (BUILD) vs {fp[1][:16]} (here)")
        for line in report.references:
            click.echo(visible(line, 600))
        if report.environment:
            click.echo("environment (recorded, not part of the model): "
                       + visible("; ".join(report.environment), 600) + " (BUILD vs here)")
    if not report.same:
        raise SystemExit(EXIT_DIFFERENT)


def _matrix(cfg, config_path: Path, out: Path, targets: tuple[str, ...], versions: list[str], verify: bool,  # type: ignore[no-untyped-def]
            keep_failed: bool, as_json: bool, console) -> None:
    """One build per toolkit version (each under <out>/toolkit-<V>/), then the comparison of each later version
    with the first (`rkdet compare-builds`)."""
    from rkdet.convert.pipeline import convert
    from rkdet.convert.toolkit_env import pinned_sha256

    for v in versions:
        pinned_sha256(v)
    built: dict[str, list] = {}
    for v in versions:
        vcfg = cfg.model_copy(update={"toolkit": cfg.toolkit.model_copy(update={"version": v})})
        with console.status(f"converting with rknn-toolkit2 {v}") as status:
            built[v] = convert(vcfg, out / f"toolkit-{v}", [t.lower() for t in targets] or None, verify=verify,
                               keep_failed=keep_failed, progress=lambda msg: (status.update(msg), console.log(msg)))
        for r in built[v]:
            console.print(f"[green]built[/] {r.folder}  fingerprint {r.fingerprint[:16]}  (rknn-toolkit2 {v})")
    from rkdet.buildcompare.names import upgrade_report_names
    from rkdet.buildcompare.report import compare_builds, json_text, write_html
    from rkdet.diff.report import write_report_file

    comparisons, worst = [], 0
    first = {r.platform: r for r in built[versions[0]]}
    for v in versions[1:]:
        for r in built[v]:
            base = first.get(r.platform)
            if base is None:
                continue
            c = compare_builds(base.folder, r.folder)
            names = upgrade_report_names(out, versions[0], v, r.platform)
            write_report_file(names.json, json_text(c))
            write_html(c, names.html)
            for line in c.lines():
                console.print(line, markup=False, highlight=False, soft_wrap=True)
            comparisons.append({"platform": r.platform, "a": versions[0], "b": v, "same": c.same,
                                "verdict": c.verdict(), "report": str(names.json)})
            worst = max(worst, c.exit_code)
    summary = {"schema": "rkdet.convert-matrix/1", "toolkits": versions,
               "builds": {v: [{"platform": r.platform, "folder": str(r.folder), "fingerprint": r.fingerprint}
                              for r in rs] for v, rs in built.items()}, "comparisons": comparisons}
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
    if worst:  # the builds are made; the toolkits do not give the same model (exit 1, as compare-builds)
        raise SystemExit(worst)
