#!/usr/bin/env python3
"""Checks that every manifest agrees with versions.toml (issue 37).

    scripts/check-versions.py                 the manifests and READMEs
    scripts/check-versions.py --print KEY     prints one value (module.version,
                                              clients.node.package, ...)
    scripts/check-versions.py --module-list FILE
                                              also checks a `redis-cli MODULE LIST`
                                              output: dlock's ver is the module's

Exits 1 and names every disagreement. Standard library only (Python 3.11+:
tomllib).
"""
import json
import re
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
# The Java modules published (the test kit, the examples and the bench are not).
JAVA_PUBLISHED = [
    "dlock-bom",
    "dlock-client",
    "dlock-lettuce",
    "dlock-jedis",
    "dlock-shedlock",
    "dlock-spring-integration",
]


def load():
    with open(ROOT / "versions.toml", "rb") as f:
        return tomllib.load(f)


def module_ver(version):
    major, minor, patch = (int(p) for p in version.split("."))
    return major * 10_000 + minor * 100 + patch


def toml_of(path):
    with open(ROOT / path, "rb") as f:
        return tomllib.load(f)


def compat_row(readme, version, module):
    """The README's compatibility table has the row `| version | module ...`."""
    text = (ROOT / readme).read_text()
    row = re.compile(
        r"^\|\s*" + re.escape(version) + r"\s*\|\s*" + re.escape(module) + r"\b", re.M
    )
    return bool(row.search(text))


def check(v, problems):
    def expect(what, got, want):
        if got != want:
            problems.append(f"{what}: {got!r}, versions.toml says {want!r}")

    module = v["module"]["version"]
    root = toml_of("Cargo.toml")["package"]
    expect("Cargo.toml package.version (the module)", root["version"], module)
    expect("Cargo.toml package.publish (the name dlock is taken)", root.get("publish"), False)

    c = v["clients"]
    rust = toml_of(c["rust"]["manifest"])["package"]
    expect("clients/rust/Cargo.toml name", rust["name"], c["rust"]["package"])
    expect("clients/rust/Cargo.toml version", rust["version"], c["rust"]["version"])

    py = toml_of(c["python"]["manifest"])["project"]
    expect("clients/python/pyproject.toml name", py["name"], c["python"]["package"])
    expect("clients/python/pyproject.toml version", py["version"], c["python"]["version"])

    init = (ROOT / "clients/python/dlock/__init__.py").read_text()
    found = re.search(r'^__version__ = "([^"]+)"', init, re.M)
    expect("clients/python/dlock/__init__.py __version__", found and found.group(1), c["python"]["version"])

    pkg = json.loads((ROOT / c["node"]["manifest"]).read_text())
    expect("clients/node/package.json name", pkg["name"], c["node"]["package"])
    expect("clients/node/package.json version", pkg["version"], c["node"]["version"])
    lock = json.loads((ROOT / "clients/node/package-lock.json").read_text())
    expect("clients/node/package-lock.json name", lock["name"], c["node"]["package"])
    expect("clients/node/package-lock.json version", lock["version"], c["node"]["version"])

    java = c["java"]["version"]
    parent = ET.parse(ROOT / "clients/java/pom.xml").getroot()
    expect("clients/java/pom.xml version", parent.findtext("m:version", None, POM_NS), java)
    for module_dir in sorted((ROOT / "clients/java").glob("*/pom.xml")):
        pom = ET.parse(module_dir).getroot()
        name = module_dir.parent.name
        own = pom.findtext("m:version", None, POM_NS)
        inherited = pom.findtext("m:parent/m:version", None, POM_NS)
        expect(f"clients/java/{name}/pom.xml version", own or inherited, java)
        for dep in pom.iterfind(".//m:dependency", POM_NS):
            if dep.findtext("m:groupId", None, POM_NS) == "dev.dlock":
                dv = dep.findtext("m:version", None, POM_NS)
                if dv not in (None, "${project.version}"):
                    expect(f"clients/java/{name}/pom.xml dev.dlock dependency", dv, java)
    for name in JAVA_PUBLISHED:
        if not (ROOT / "clients/java" / name / "pom.xml").exists():
            problems.append(f"clients/java/{name}/pom.xml is missing")
    java_readme = (ROOT / "clients/java/README.md").read_text()
    if f"client {java} needs the dlock module {c['java']['module']}" not in java_readme:
        problems.append(
            f"clients/java/README.md does not say `client {java} needs the dlock module {c['java']['module']}`"
        )
    if f"<version>{java}</version>" not in java_readme:
        problems.append(f"clients/java/README.md's dependency snippet is not at {java}")

    go_readme = (ROOT / c["go"]["manifest"]).read_text()
    if f"@v{c['go']['version']}" not in go_readme:
        problems.append(f"clients/go/README.md's install steps do not require v{c['go']['version']}")

    for lang, readme in [
        ("rust", "clients/rust/README.md"),
        ("python", "clients/python/README.md"),
        ("node", "clients/node/README.md"),
        ("go", "clients/go/README.md"),
    ]:
        if not compat_row(readme, c[lang]["version"], c[lang]["module"]):
            problems.append(
                f"{readme}: no compatibility row `| {c[lang]['version']} | {c[lang]['module']}`"
            )
        if c[lang]["module"] != module and module_ver(c[lang]["module"]) > module_ver(module):
            problems.append(f"{lang} needs module {c[lang]['module']}, newer than {module}")

    readme = (ROOT / "README.md").read_text()
    for lang in ("rust", "python", "node"):
        if f"`{c[lang]['package']}`" not in readme:
            problems.append(f"README.md does not name the {lang} package `{c[lang]['package']}`")

    # The artifact file names the READMEs tell users to install.
    for readme, name in [
        ("README.md", f"dlock-{module}-linux-x86_64.tar.gz"),
        ("README.md", f"{v['module']['deb']}_{module}-1_amd64.deb"),
        ("clients/node/README.md", f"{c['node']['package']}-{c['node']['version']}.tgz"),
        ("clients/python/README.md", f"dlock_redis-{c['python']['version']}-py3-none-any.whl"),
        ("clients/rust/README.md", f"{c['rust']['package']}-{c['rust']['version']}.crate"),
    ]:
        if name not in (ROOT / readme).read_text():
            problems.append(f"{readme} does not name the artifact {name}")

    # The CLI once it exists (clients/cli, crate dlock-cli).
    cli_manifest = ROOT / c["cli"]["manifest"]
    if cli_manifest.exists():
        cli = toml_of(c["cli"]["manifest"])["package"]
        expect("clients/cli/Cargo.toml name", cli["name"], c["cli"]["package"])
        expect("clients/cli/Cargo.toml version", cli["version"], c["cli"]["version"])

    # LICENSE: one text, copied where a package manager takes files from.
    license_text = (ROOT / "LICENSE").read_text()
    for copy in ["clients/rust/LICENSE", "clients/python/LICENSE", "clients/node/LICENSE"]:
        path = ROOT / copy
        if not path.exists() or path.read_text() != license_text:
            problems.append(f"{copy} is not a copy of LICENSE")


def check_module_list(v, path, problems):
    """`redis-cli MODULE LIST` output (one word a line): dlock's ver."""
    words = Path(path).read_text().split()
    want = str(module_ver(v["module"]["version"]))
    if "dlock" not in words:
        problems.append(f"MODULE LIST does not list dlock: {words}")
        return
    at = words.index("dlock")
    rest = words[at:]
    got = rest[rest.index("ver") + 1] if "ver" in rest else None
    if got != want:
        problems.append(f"MODULE LIST: dlock ver {got}, versions.toml says {want}")


def main(argv):
    v = load()
    if len(argv) == 2 and argv[0] == "--print":
        value = v
        for part in argv[1].split("."):
            value = value[part]
        print(value)
        return 0
    problems = []
    if len(argv) == 2 and argv[0] == "--module-list":
        check_module_list(v, argv[1], problems)
    elif argv:
        print(__doc__, file=sys.stderr)
        return 2
    else:
        check(v, problems)
    for p in problems:
        print(f"versions: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
