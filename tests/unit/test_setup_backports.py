"""scripts/backports-source.sh: the backports entry follows the machine's own Debian source
(its mirror URI and its keyring), read from sample apt dirs; never the real /etc/apt, never apt-get."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DERIVE = ROOT / "scripts" / "backports-source.sh"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIRROR = "https://mirror.corp.example/debian"


def apt_dir(tmp_path: Path, sources_list: str | None = None, **drop_ins: str) -> Path:
    """An apt dir: sources.list plus sources.list.d/<name> files (name with its dots as '__')."""
    (tmp_path / "sources.list.d").mkdir()
    if sources_list is not None:
        (tmp_path / "sources.list").write_text(sources_list)
    for name, text in drop_ins.items():
        (tmp_path / "sources.list.d" / name.replace("__", ".")).write_text(text)
    return tmp_path


def derive(apt: Path, codename: str = "bookworm") -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(DERIVE), str(apt), codename], capture_output=True, text=True, check=False)


def stanza(uri: str, signed_by: str | None = None) -> str:
    text = f"Types: deb\nURIs: {uri}\nSuites: bookworm-backports\nComponents: main\n"
    return text + (f"Signed-By: {signed_by}\n" if signed_by else "")


DEBIAN_12_SOURCES = f"""Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: {MIRROR}
Suites: bookworm bookworm-updates
Components: main
Signed-By: {KEYRING}

Types: deb
URIs: {MIRROR}-security
Suites: bookworm-security
Components: main
Signed-By: {KEYRING}
"""


def test_deb822_source_gives_its_mirror_and_keyring(tmp_path: Path) -> None:
    result = derive(apt_dir(tmp_path, debian__sources=DEBIAN_12_SOURCES))
    assert (result.returncode, result.stdout) == (0, stanza(MIRROR, KEYRING))


def test_deb822_without_signed_by_has_no_signed_by(tmp_path: Path) -> None:
    text = "Types: deb\nURIs: http://ftp.de.debian.org/debian\nSuites: bookworm\nComponents: main contrib\n"
    result = derive(apt_dir(tmp_path, debian__sources=text))
    assert (result.returncode, result.stdout) == (0, stanza("http://ftp.de.debian.org/debian"))


def test_deb822_skips_disabled_source_only_and_other_suite_stanzas(tmp_path: Path) -> None:
    text = (f"Types: deb\nURIs: http://disabled.example/debian\nSuites: bookworm\nComponents: main\nEnabled: no\n\n"
            f"Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\nComponents: main\n\n"
            f"Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
            f"types: deb deb-src\nuris: {MIRROR} http://second.example/debian\nsuites: bookworm\ncomponents: main\n"
            f"signed-by: {KEYRING}\n")
    result = derive(apt_dir(tmp_path, debian__sources=text))
    assert (result.returncode, result.stdout) == (0, stanza(MIRROR, KEYRING))


def test_deb822_inline_key_is_carried_over_as_a_multi_line_field(tmp_path: Path) -> None:
    key = " -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBGPL0BUBEADmW5NdOOHwPIJ\n -----END PGP PUBLIC KEY BLOCK-----\n"
    text = f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm\nComponents: main\nSigned-By:\n{key}"
    result = derive(apt_dir(tmp_path, mirror__sources=text))
    assert result.returncode == 0, result.stderr
    assert result.stdout == stanza(MIRROR) + "Signed-By:\n" + key


def test_one_line_source_with_options_gives_its_mirror_and_signed_by(tmp_path: Path) -> None:
    text = (f"# deb http://old.example/debian bookworm main\n"
            f"deb-src {MIRROR} bookworm main\n"
            f"deb http://security.debian.org/debian-security bookworm-security main\n"
            f"deb [ arch=amd64 signed-by={KEYRING} ] {MIRROR} bookworm main contrib  # the mirror\n")
    result = derive(apt_dir(tmp_path, text))
    assert (result.returncode, result.stdout) == (0, stanza(MIRROR, KEYRING))


def test_one_line_source_without_options_has_no_signed_by(tmp_path: Path) -> None:
    result = derive(apt_dir(tmp_path, f"deb {MIRROR} bookworm main\n"))
    assert (result.returncode, result.stdout) == (0, stanza(MIRROR))


def test_sources_list_comes_before_the_drop_in_folder(tmp_path: Path) -> None:
    apt = apt_dir(tmp_path, "deb http://first.example/debian bookworm main\n", debian__sources=DEBIAN_12_SOURCES)
    assert derive(apt).stdout == stanza("http://first.example/debian")


def test_one_line_drop_in_and_ignored_file_names(tmp_path: Path) -> None:
    apt = apt_dir(tmp_path, "", a__list__disabled="deb http://no.example/debian bookworm main\n",
                  mirror__list=f"deb [signed-by={KEYRING}] {MIRROR} bookworm main\n")
    assert derive(apt).stdout == stanza(MIRROR, KEYRING)


def test_no_source_for_the_codename_fails_naming_the_apt_dir(tmp_path: Path) -> None:
    apt = apt_dir(tmp_path, "deb http://deb.debian.org/debian bullseye main\n")
    result = derive(apt)
    assert result.returncode == 1 and result.stdout == ""
    assert f"no enabled 'deb' source for suite bookworm in {apt}/sources.list" in result.stderr


def backports_configured(apt: Path) -> bool:
    """setup.sh's own check, lifted out of the script and run on the sample dir."""
    function = subprocess.run(["sed", "-n", "/^backports_configured()/,/^}/p", str(ROOT / "scripts" / "setup.sh")],
                              capture_output=True, text=True, check=True).stdout
    assert function.strip(), "backports_configured() not found in scripts/setup.sh"
    return subprocess.run(["bash", "-c", f"{function}\nbackports_configured \"$1\"", "check", str(apt)],
                          check=False).returncode == 0


def test_setup_writes_once_a_written_entry_is_recognised_so_the_next_run_leaves_it(tmp_path: Path) -> None:
    apt = apt_dir(tmp_path, "# deb http://deb.debian.org/debian bookworm-backports main\n",
                  debian__sources=DEBIAN_12_SOURCES)
    assert not backports_configured(apt)  # a commented entry does not count
    (apt / "sources.list.d" / "bookworm-backports.sources").write_text(derive(apt).stdout)
    assert backports_configured(apt)
    assert derive(apt).stdout == stanza(MIRROR, KEYRING)  # and the derivation is unchanged by its own output


@pytest.mark.parametrize("argv", [[], ["/etc/apt"]])
def test_missing_arguments_are_named(argv: list[str]) -> None:
    result = subprocess.run(["bash", str(DERIVE), *argv], capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "usage: backports-source.sh APT_DIR CODENAME" in result.stderr
