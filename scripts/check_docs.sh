#!/usr/bin/env bash
# Checks the relative links of README.md and docs/**/*.md: each must name a file or directory that
# exists inside the repository, and a `#fragment` must match a heading of the target Markdown file
# (GitHub's anchor rules: lower case, punctuation dropped, spaces become hyphens).
# External links (http:, https:, mailto:) are not fetched. Code blocks and inline code are skipped.
# Usage: scripts/check_docs.sh   (exit 1 on any broken link)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd -P)

# Markdown text without fenced code blocks and inline code spans.
prose() {
  awk '/^[[:space:]]*```/ { fence = !fence; next } !fence' "$1" | sed 's/`[^`]*`//g'
}

# GitHub-style anchors of every heading in a Markdown file, one per line.
anchors() {
  awk '/^[[:space:]]*```/ { fence = !fence; next } !fence && /^#+ / { sub(/^#+ /, ""); print }' "$1" |
    tr '[:upper:]' '[:lower:]' | sed 's/[^a-z0-9 _-]//g; s/ /-/g'
}

broken=0
checked=0
files=(README.md)
while IFS= read -r f; do files+=("$f"); done < <(find docs -name '*.md' | sort)
for file in "${files[@]}"; do
  dir=$(dirname "$file")
  while IFS= read -r link; do
    target=${link%%#*}
    fragment=
    [[ $link == *'#'* ]] && fragment=${link#*#}
    case $target in
      http:* | https:* | mailto:*) continue ;;
    esac
    checked=$((checked + 1))
    if [[ -z $target ]]; then
      path=$file
    else
      path="$dir/$target"
    fi
    if [[ ! -e $path ]]; then
      echo "$file: broken link $link (no $path)"
      broken=$((broken + 1))
      continue
    fi
    real=$(cd "$(dirname "$path")" && pwd -P)/$(basename "$path")
    if [[ $real != "$root"/* ]]; then
      echo "$file: link $link points outside the repository"
      broken=$((broken + 1))
      continue
    fi
    if [[ -n $fragment && $path == *.md ]] && ! anchors "$path" | grep -qxF -- "$fragment"; then
      echo "$file: link $link: no heading #$fragment in $path"
      broken=$((broken + 1))
    fi
  done < <(prose "$file" | grep -o '\]([^)[:space:]]*)' | sed 's/^](//; s/)$//')
done
echo "checked $checked relative links in ${#files[@]} files; $broken broken"
[[ $broken -eq 0 ]]
