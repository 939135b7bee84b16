"""Lab inventories written once for Ansible and rkdet (INI with ranges + group_vars/host_vars, and YAML),
and the patterns the parity test runs through both engines. Shared by the native and parity tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

INI = """\
# the lab, written once: Ansible and rkdet read this same file
bastion ansible_host=10.0.0.1 ansible_user=jump

[rk3588]
rk[01:04].lab ansible_user=rock
opi5-[a:c] rkdet_soc=rk3588

[rk3568]
roc[1:9:4].lab:2200

[staging]
rk01.lab
roc5.lab

[lab:children]
rk3588
rk3568

[lab:vars]
ansible_become=true
ansible_ssh_common_args='-o ProxyJump=bastion'

[all:vars]
rkdet_workdir=/opt/rkdet
"""

YAML = """\
all:
  vars:
    rkdet_workdir: /opt/rkdet
  hosts:
    bastion:
      ansible_host: 10.0.0.1
      ansible_user: jump
  children:
    lab:
      vars:
        ansible_become: yes
        ansible_ssh_common_args: -J bastion
      children:
        rk3588:
          hosts:
            rk[01:04].lab:
              ansible_user: rock
            opi5-[a:c]:
              rkdet_soc: rk3588
        rk3568:
          hosts:
            "roc[1:9:4].lab:2200":
    staging:
      hosts:
        rk01.lab:
        roc5.lab:
    shelf:
      hosts:
        n[1:2]-[x:y]:
          ansible_become: false
"""

GROUP_VARS = {
    "group_vars/all/10-base.yml": "ansible_port: 2022\nrkdet_tags: [lab]\n",
    "group_vars/all/20-more.yaml": "ansible_ssh_private_key_file: ~/.ssh/lab_ed25519\n",
    "group_vars/all/README.md": "not vars: another extension\n",
    "group_vars/rk3568.yml": "ansible_user: radxa\nrkdet_soc: rk3568\n",
    "group_vars/staging": "rkdet_tags: [lab, staging]\n",
    "host_vars/rk02.lab.yml": "ansible_host: 192.168.1.2\n",
    "host_vars/opi5-b/conn.json": '{"ansible_port": 2202}\n',
}

PATTERNS = [
    "all", "*", "rk3588", "rk3568", "lab", "staging", "ungrouped", "bastion", "rk01.lab", "rk0*", "rk0?.lab",
    "rk3588:rk3568", "rk3588,staging", "rk3588 staging", "lab:!staging", "lab:&staging", "!staging",
    "~rk0[13]\\.lab", "~opi", "~.*", "rk3588[0]", "rk3588[1:2]", "rk3588[-1]", "rk3588[2:]", "rk3588[1-2]",
    "lab[0]", "rk3568[0:0]", "*.lab", "rk*:!rk3568", "staging:&rk3568", "a*", "opi5-[ab]",
    "rk3588:&staging:!rk01.lab", "nosuch", "rk3588:nosuch", "all:!nosuch", "rk3588[9]", "shelf", "n*-x",
]


def write_lab(root: Path, kind: str) -> Path:
    """The lab's inventory (`ini` or `yaml`) with its group_vars/ and host_vars/ beside it; returns its path."""
    root.mkdir(parents=True, exist_ok=True)
    for rel, text in GROUP_VARS.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    path = root / ("hosts.ini" if kind == "ini" else "hosts.yml")
    path.write_text(textwrap.dedent(INI if kind == "ini" else YAML))
    return path
