#!/usr/bin/env bash
# Every value in values.yaml has a row in README.md's "## Values" table, and
# every row names a value that exists (make chart-lint runs this).
#
# A row's first column holds one or more backticked dotted paths. A path is
# documented when it, or a map above it, has a row: `resources` covers
# resources.limits.cpu, which is free-form Kubernetes structure.
# values.yaml is read by indentation (two spaces a level, keys `name:`); list
# items' keys count as keys of the list's own value.
set -euo pipefail
chart="${1:-$(dirname "$0")/..}"

# Backticked names in the first column of the Values table's rows.
documented=$(sed -n '/^## Values$/,/^## /p' "$chart/README.md" \
  | awk -F'|' '/^\| `/ { print $2 }' | grep -o '`[^`]*`' | tr -d '`' | sort -u)

# Dotted paths of values.yaml's keys; maps (keys whose children are indented
# below them) are left out, their leaves are listed.
values=$(awk '
  /^[[:space:]]*(#|$)/ { next }
  {
    line = $0
    match(line, /^ */); indent = RLENGTH
    rest = substr(line, indent + 1)
    if (rest ~ /^- /) { rest = substr(rest, 3); indent += 2 }
    if (rest !~ /^[A-Za-z_][A-Za-z0-9_]*:( |$)/) next
    key = rest; sub(/:.*/, "", key)
    value = rest; sub(/^[^:]*:[ ]*/, "", value)
    if (pending != "" && indent <= pending_indent) print pending
    pending = ""
    while (depth > 0 && indents[depth] >= indent) depth--
    depth++; indents[depth] = indent; keys[depth] = key
    path = keys[1]; for (i = 2; i <= depth; i++) path = path "." keys[i]
    if (value == "" || value ~ /^#/) { pending = path; pending_indent = indent } else print path
  }
  END { if (pending != "") print pending }
' "$chart/values.yaml" | sort -u)

status=0
while read -r path; do
  p="$path"
  until grep -qxF "$p" <<<"$documented"; do
    if [[ "$p" != *.* ]]; then
      echo "values.yaml: \`$path\` has no row in README.md's Values table" >&2
      status=1
      break
    fi
    p="${p%.*}"
  done
done <<<"$values"
while read -r name; do
  grep -qE "^${name//./\\.}(\.|$)" <<<"$values" \
    || { echo "README.md: the Values table documents \`$name\`, which values.yaml does not have" >&2; status=1; }
done <<<"$documented"
exit "$status"
