#!/bin/sh
# Build (or reuse) a side environment that tests need: a separate virtual environment at .venvs/NAME with the
# packages pinned in scripts/side_envs/NAME.txt. Side environments exist because their packages cannot share
# hermes-nb's interpreter (atroposlib pins its own stack; SkyRL needs Python 3.12).
#
#   sh scripts/side_env.sh NAME        prints the environment's python on the last line
#
# The requirements file's first line may name the interpreter: "# python: 3.12"; an "# uninstall: A B" line names
# packages removed after the install (a dependency pip insists on that breaks the environment's imports, or one it
# never loads); a "# post: ARGS" line is run as the environment's python ARGS (split on spaces) after that, with
# hermes-nb's source importable: the first-use work of a package (a download it would make at run time) done once,
# here. Files the new environment shares with .venv and the other side environments are then hard-linked to one
# copy (scripts/link_duplicates.py). The build is cached: a stamp holds the hash of the requirements file and the
# interpreter version, so a changed pin rebuilds it and an unchanged one costs nothing. A failed build leaves no
# stamp, so the next call starts over.
set -eu
name="$1"
root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/scripts/side_envs/$name.txt"
# SIDE_ENVS_DIR: where side environments live (default .venvs), e.g. to build a new one beside a shared .venvs.
target="${SIDE_ENVS_DIR:-$root/.venvs}/$name"
[ -f "$requirements" ] || { echo "side_env: no $requirements (known: $(ls "$root/scripts/side_envs"))" >&2; exit 2; }

version="$(sed -n 's/^# python: *//p' "$requirements" | head -n 1)"
interpreter="python3"
if [ -n "$version" ]; then
    interpreter="python$version"
    # Run it rather than look it up: a pyenv shim is found on PATH even when its version is not the active one.
    if ! "$interpreter" -c '' >/dev/null 2>&1; then
        # pyenv's versions, whether or not pyenv itself is on PATH.
        pyenv_root="$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")"
        candidate="$(ls -d "$pyenv_root/versions/$version"* 2>/dev/null | sort -V | tail -n 1)"
        [ -n "$candidate" ] && interpreter="$candidate/bin/python"
    fi
fi
"$interpreter" -c '' >/dev/null 2>&1 || { echo "side_env: $name needs Python $version, not found" >&2; exit 2; }

stamp_value="$(cat "$requirements" | sha256sum | cut -d' ' -f1) $("$interpreter" -c 'import sys; print(sys.version.split()[0])')"
if [ -f "$target/.stamp" ] && [ "$(cat "$target/.stamp")" = "$stamp_value" ]; then
    echo "$target/bin/python"
    exit 0
fi

echo "side_env: building $target with $interpreter" >&2
rm -rf "$target"
"$interpreter" -m venv "$target"
"$target/bin/python" -m pip install -q --upgrade pip >&2
"$target/bin/python" -m pip install -q -r "$requirements" >&2
unwanted="$(sed -n 's/^# uninstall: *//p' "$requirements" | head -n 1)"
# Word splitting wanted: the line is a list of package names.
[ -z "$unwanted" ] || "$target/bin/python" -m pip uninstall -q -y $unwanted >&2
post="$(sed -n 's/^# post: *//p' "$requirements" | head -n 1)"
# Word splitting wanted: the line is the arguments of one python command.
[ -z "$post" ] || PYTHONPATH="$root" "$target/bin/python" $post >&2
# What this environment repeats from hermes-nb's venv and the other side environments is stored once.
set -- "$(dirname "$target")"/*
[ -d "$root/.venv" ] && set -- "$root/.venv" "$@"
"$target/bin/python" "$root/scripts/link_duplicates.py" "$@" >&2
echo "$stamp_value" > "$target/.stamp"
echo "$target/bin/python"
