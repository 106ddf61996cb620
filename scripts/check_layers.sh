#!/usr/bin/env bash
# The layering rules of docs/architecture.md ("a layer never includes one above it", and each layer's "never"), checked
# over every #include of the tree. scripts/test.sh runs it; a forbidden include fails the run, naming the file, the
# line, the include and the rule. The breaks that review 3 found and that are not mended yet are listed, one per line,
# in scripts/layer_exceptions.txt ("file -> include  # why"); an entry that no longer occurs fails too, so the list only
# shrinks.
#
#   bash scripts/check_layers.sh [ROOT]     # ROOT: the tree to check (default: this repository)
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || exit 2
exceptions=scripts/layer_exceptions.txt

# folder | what it must never include (prefixes of the include path, separated by spaces) | allowed includes: exact
# include paths that pass although a forbidden prefix covers them, each a deliberate part of the design (empty: none) |
# the rule, in words. An allowed include is not an exception to mend: engine/ carries kernels/sampling.hpp's plain
# sampling types because one sampling spec goes from the request to the kernel (review 3, §5 step 3); every other
# kernels/ include stays forbidden there.
rules=(
  "util/|kernels/ comm/ model/ text/ engine/ actorllm/ actors/ net/ api/ apps/ caf/ boost/beast/ hub/||utilities are the lowest layer"
  "kernels/|comm/ model/ text/ engine/ actorllm/ actors/ net/ api/ apps/ caf/ boost/beast/ hub/||kernels know devices and ops, nothing above them"
  "comm/|model/ text/ engine/ actorllm/ actors/ net/ api/ apps/ caf/ boost/beast/ hub/||collectives are the data plane, below models and actors"
  "model/|kernels/cpu/ kernels/cuda/ text/ engine/ actorllm/ actors/ net/ api/ apps/ caf/ boost/beast/ hub/||models compute over backend& only, never a backend's own files, and no CAF"
  "text/|kernels/ comm/ model/ engine/ actorllm/ actors/ net/ api/ apps/ caf/ boost/beast/ hub/||text is independent of models and runtimes"
  "hub/|kernels/ comm/ model/ text/ engine/ actorllm/ actors/ net/ api/ apps/ caf/||the Hub client knows files and HTTP: only the apps use it"
  "engine/|model/ kernels/ comm/ actorllm/ actors/ net/ api/ apps/ caf/ boost/beast/ hub/|kernels/sampling.hpp|the engine core is plain state machines: no CAF, no model"
  "include/actorllm/proto/|actors/ net/ api/ apps/ boost/beast/ hub/||the protocol is below the actors"
  "runner/|caf/ actorllm/proto/ actors/ net/ api/ apps/ kernels/cpu/ kernels/cuda/ comm/cuda/ boost/beast/ hub/||the model runner is plain classes over the engine core and the model: no CAF, no protocol"
  "actors/|net/ api/ apps/ kernels/cuda/ comm/cuda/ boost/beast/ hub/||actors are below the front door and reach devices through the backend interface"
  "net/|actors/ apps/ caf/ actorllm/proto/ kernels/ model/ comm/ engine/ hub/||the front door reaches the engine through the public API only"
  "api/|net/ apps/ boost/beast/ hub/||the embedding API is below the server and the binary"
)

# Public headers (include/actorllm/*.hpp, not the protocol): no CAF and no internal folder, so host programs build
# against the installed package alone.
public_forbidden="caf/ actors/ net/ api/ apps/ kernels/ model/ comm/ engine/ text/ util/ hub/ boost/ actorllm/proto/"

declare -A allowed=() seen=()
if [[ -f "$exceptions" ]]; then
  while IFS= read -r line; do
    line=${line%%#*}
    line=$(echo "$line" | xargs)
    [[ -z "$line" ]] && continue
    allowed["$line"]=1
  done <"$exceptions"
fi

failures=0
check() { # file line include rule
  local key="$1 -> $3"
  if [[ -n "${allowed[$key]:-}" ]]; then
    seen["$key"]=1
    return
  fi
  echo "check_layers: $1:$2 includes \"$3\": $4"
  failures=$((failures + 1))
}

# Every #include of the grep -n output read on stdin ("file:line:text") against the forbidden prefixes, but for the
# allowed include paths.
check_includes() { # forbidden-prefixes allowed-includes rule
  local forbidden=$1 permitted=$2 rule=$3 file line inc p a ok
  while IFS=: read -r file line inc; do
    # bash's own regex: a subshell and sed per include line made this take minutes where forks are slow (a VM).
    [[ "$inc" =~ include[[:space:]]*[\<\"]([^\>\"]*)[\>\"] ]] && inc=${BASH_REMATCH[1]}
    ok=0
    for a in $permitted; do
      [[ "$inc" == "$a" ]] && ok=1
    done
    ((ok)) && continue
    for p in $forbidden; do
      if [[ "$inc" == "$p"* ]]; then
        check "$file" "$line" "$inc" "$rule (never $p)"
        break
      fi
    done
  done
}
include_line='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]'

for r in "${rules[@]}"; do
  IFS='|' read -r folder forbidden permitted rule <<<"$r"
  [[ -d "$folder" ]] || continue
  check_includes "$forbidden" "$permitted" "$rule" < <(grep -rnHE "$include_line" "$folder" --include='*.hpp' --include='*.cpp' \
    --include='*.h' --include='*.cu' --include='*.cuh')
done
mapfile -t public_headers < <(find include/actorllm -maxdepth 1 -name '*.hpp' 2>/dev/null | sort)
if ((${#public_headers[@]})); then
  check_includes "$public_forbidden" "" "public headers build against the installed package alone" \
    < <(grep -nHE "$include_line" "${public_headers[@]}")
fi

# The tree's shape as review 3 (../shared/docs/DESIGN-REVIEW.md §5) asked for it, its "Verify" lines kept as rules.
shape_failure() { # what is wrong
  echo "check_layers: $1"
  failures=$((failures + 1))
}
if [[ -d kernels ]]; then
  for f in kernels/*collective* kernels/*nccl* kernels/*all_reduce* kernels/cuda/*collective* kernels/cuda/*nccl* \
    kernels/cuda/*all_reduce*; do
    [[ -e "$f" ]] && shape_failure "$f: communication lives in comm/ (comm/cuda/ for NCCL and the custom all-reduce), not kernels/"
  done
fi
if [[ -d actors ]]; then
  while IFS= read -r d; do
    n=$(find "$d" -maxdepth 1 -type f | wc -l)
    ((n > 25)) && shape_failure "$d holds $n files: no folder under actors/ holds more than 25 (split it into a wing)"
  done < <(find actors -type d)
  while IFS=: read -r file _; do
    [[ "$file" != actors/executors/replica.hpp ]] && shape_failure "$file defines struct replica: it lives in actors/executors/replica.hpp only"
  done < <(grep -rn --include='*.hpp' --include='*.cpp' '^struct replica {' actors api 2>/dev/null)
  for f in $(find actors -name 'block_manager_actor.*'); do
    shape_failure "$f: the KV cache is planned by actors/executors/cache_plan, no block-manager actor"
  done
  n=$(grep -rn --include='*.cpp' --include='*.hpp' '\.enforce_eager = ' actors | wc -l)
  ((n > 1)) && shape_failure "actors/ assigns enforce_eager $n times: a shard knob is copied once, in make_shard_assignment"
fi

# One sampling spec from request to kernel (kernels/sampling.hpp): no second spec, and no per-request tokenizer path
# on the wire (the sampler shard learns its tokenizer from its assignment).
while IFS=: read -r file _; do
  shape_failure "$file defines a second sampling spec (sampler_spec): a request's sampling is ops::sampling_spec (kernels/sampling.hpp)"
done < <(grep -rn --include='*.hpp' --include='*.cpp' 'struct sampler[_]spec\b' util kernels comm model text engine runner \
  hub include actors net api apps 2>/dev/null)
if [[ -d include/actorllm/proto ]]; then
  while IFS=: read -r file _; do
    shape_failure "$file names tokenizer_dir: the sampler shard gets its tokenizer once, from shard_assignment::tokenizer"
  done < <(grep -rn 'tokenizer_dir' include/actorllm/proto 2>/dev/null)
fi

for key in "${!allowed[@]}"; do
  if [[ -z "${seen[$key]:-}" ]]; then
    echo "check_layers: '$key' is listed in $exceptions but no longer occurs: remove the entry"
    failures=$((failures + 1))
  fi
done

if ((failures > 0)); then
  echo "check_layers: $failures problem(s) (rules: docs/architecture.md, Layers)"
  exit 1
fi
echo "check_layers: every include keeps the layers (${#allowed[@]} listed exception(s) left)"
