"""`rkdet config show`: print the fully resolved config, defaults marked."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from rkdet.config import DEFAULT_CONFIG, explicit_keys, load_config


@click.group("config")
def config_group() -> None:
    """Inspect configs."""


@config_group.command("show")
@click.option("--config", "config_path", type=click.Path(path_type=Path), default=DEFAULT_CONFIG,
              show_default=True, help="YAML config file.")
@click.option("--json", "as_json", is_flag=True, help="Print the resolved config as JSON.")
def show_command(config_path: Path, as_json: bool) -> None:
    """Print the resolved config; keys not written in the file are marked `# default`."""
    cfg = load_config(config_path)
    resolved = cfg.resolved_dict()
    if as_json:
        click.echo(json.dumps(resolved, indent=2, sort_keys=True))
        return
    given = explicit_keys(config_path)
    click.echo(f"# {config_path} resolved")
    for section, value in resolved.items():
        mark = "" if section in given else "  # default"
        if not isinstance(value, dict):
            click.echo(f"{section}: {json.dumps(value)}{mark}")
            continue
        click.echo(f"{section}:{mark}")
        for key, item in value.items():
            dumped = yaml.safe_dump(item, default_flow_style=True, width=1000).strip()
            dumped = dumped.removesuffix("\n...").removesuffix("...").strip()
            mark = "" if f"{section}.{key}" in given else "  # default"
            click.echo(f"  {key}: {dumped}{mark}")
