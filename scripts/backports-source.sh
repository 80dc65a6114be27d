#!/usr/bin/env bash
# Usage: scripts/backports-source.sh APT_DIR CODENAME
#
# Prints a deb822 stanza for CODENAME-backports derived from the machine's own Debian
# source for CODENAME: the same URI (a corporate mirror stays the mirror) and the same
# keyring (Signed-By, a path or an inline key). Reads APT_DIR/sources.list and
# APT_DIR/sources.list.d/*.list (one-line format) and APT_DIR/sources.list.d/*.sources
# (deb822, what Debian 12 images ship), in apt's order; the first enabled `deb` entry
# whose suites include CODENAME itself wins. Exits 1 naming APT_DIR if there is none.
# Reads only: setup.sh decides whether and where to write (tests pass a sample APT_DIR).
set -euo pipefail

apt_dir=${1:?usage: backports-source.sh APT_DIR CODENAME}
codename=${2:?usage: backports-source.sh APT_DIR CODENAME}

# One-line format: deb [opt=val ...] URI SUITE COMPONENT... -> "URI<TAB>SIGNED_BY"
one_line_entry() {
  awk -v want="$codename" '
    { sub(/#.*/, "") }
    $1 != "deb" { next }
    {
      line = $0; sub(/^[ \t]*deb[ \t]+/, "", line); signed = ""
      if (substr(line, 1, 1) == "[") {
        end = index(line, "]"); if (end == 0) next
        n = split(substr(line, 2, end - 2), opts, /[ \t]+/)
        for (i = 1; i <= n; i++) if (tolower(opts[i]) ~ /^signed-by=/) signed = substr(opts[i], 11)
        line = substr(line, end + 1)
      }
      n = split(line, f, /[ \t]+/); k = 0
      for (i = 1; i <= n; i++) if (f[i] != "") rest[++k] = f[i]
      if (k >= 2 && rest[2] == want) { printf "%s\t%s\n", rest[1], signed; exit }
    }' "$1"
}

# deb822: stanzas split by blank lines; "Key: value" with indented continuation lines.
# Prints "URI<TAB>SIGNED_BY" where an inline key's lines are joined with \n escapes.
deb822_entry() {
  awk -v want="$codename" '
    function flush(   n, i, s, ok) {
      if (tolower(v["types"]) ~ /(^| )deb( |$)/ && tolower(v["enabled"]) != "no") {
        n = split(v["suites"], s, / +/)
        for (i = 1; i <= n; i++) if (s[i] == want) ok = 1
        if (ok) { split(v["uris"], u, / +/); printf "%s\t%s\n", u[1], v["signed-by"]; found = 1; exit }
      }
      delete v; key = ""
    }
    /^#/ { next }
    /^[ \t]*$/ { flush(); next }
    /^[ \t]/ { if (key != "") { line = $0; sub(/^[ \t]/, "", line); v[key] = v[key] "\\n" line }; next }
    {
      key = tolower(substr($0, 1, index($0, ":") - 1)); val = substr($0, index($0, ":") + 1)
      gsub(/^[ \t]+|[ \t]+$/, "", val); v[key] = val
    }
    END { if (!found) flush() }' "$1"
}

entry=""
shopt -s nullglob
for file in "$apt_dir/sources.list" "$apt_dir"/sources.list.d/*; do
  [ -f "$file" ] || continue
  case "$file" in
    *.sources) entry=$(deb822_entry "$file") ;;
    *.list) entry=$(one_line_entry "$file") ;;
    *) continue ;;
  esac
  [ -n "$entry" ] && break
done

if [ -z "$entry" ]; then
  echo "backports-source: no enabled 'deb' source for suite $codename in $apt_dir/sources.list" \
       "or $apt_dir/sources.list.d/ to derive $codename-backports from" >&2
  exit 1
fi

uri=${entry%%$'\t'*}
signed_by=${entry#*$'\t'}
printf 'Types: deb\nURIs: %s\nSuites: %s-backports\nComponents: main\n' "$uri" "$codename"
if [ -n "$signed_by" ]; then
  # An inline key starts on the next line and continues on indented ones; a path is one line.
  separator=' '
  [[ $signed_by == '\n'* ]] && separator=''
  printf 'Signed-By:%s%b\n' "$separator" "$signed_by" | sed '2,$s/^/ /'
fi
