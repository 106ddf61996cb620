#!/usr/bin/env bash
# scripts/check_layers.sh: the repository passes; a copy of its folders with one forbidden include added fails, naming
# the file, the line and the rule; an exception that no longer occurs fails; an excepted include passes.
#   check_layers_test.sh SOURCE_DIR
set -uo pipefail
src=$1
tmp=$(mktemp -d /tmp/actorllm-layers-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/scripts/check_helpers.sh
source "$(dirname "$0")/check_helpers.sh"

bash "$src/scripts/check_layers.sh" "$src" >"$tmp/repo.log" 2>&1
check "the repository keeps its layers (got: $(tail -1 "$tmp/repo.log"))" grep -q 'every include keeps the layers' "$tmp/repo.log"

tree=$tmp/tree
mkdir -p "$tree/scripts"
for d in util kernels comm model text engine runner hub include actors net api apps; do
  [[ -d "$src/$d" ]] && cp -r "$src/$d" "$tree/$d"
done
cp "$src/scripts/layer_exceptions.txt" "$tree/scripts/"
bash "$src/scripts/check_layers.sh" "$tree" >"$tmp/copy.log" 2>&1
check "a copy of the tree passes too" test $? -eq 0

# One forbidden include: the scheduler core reaching for CAF.
printf '#pragma once\n#include "engine/seq_id.hpp"\n#include <caf/actor.hpp>\n' >"$tree/engine/bad_layer.hpp"
bash "$src/scripts/check_layers.sh" "$tree" >"$tmp/bad.log" 2>&1
rc=$?
check "a forbidden include fails the check (exit $rc)" test "$rc" -eq 1
check "naming the file, the line, the include and the rule" \
  grep -q 'engine/bad_layer.hpp:3 includes "caf/actor.hpp": the engine core is plain state machines: no CAF, no model (never caf/)' "$tmp/bad.log"
rm "$tree/engine/bad_layer.hpp"

# An allowed include passes (the engine core carries the plain sampling spec), and only that exact include: any other
# kernels/ header stays forbidden there.
printf '#pragma once\n#include "kernels/sampling.hpp"\n' >"$tree/engine/sampling_ok.hpp"
bash "$src/scripts/check_layers.sh" "$tree" >"$tmp/allowed.log" 2>&1
check "an allowed include passes (got: $(tail -1 "$tmp/allowed.log"))" grep -q 'every include keeps the layers' "$tmp/allowed.log"
printf '#pragma once\n#include "kernels/sampling.hpp"\n#include "kernels/backend.hpp"\n' >"$tree/engine/sampling_ok.hpp"
bash "$src/scripts/check_layers.sh" "$tree" >"$tmp/near.log" 2>&1
check "another kernels/ header in engine/ still fails" \
  grep -q 'engine/sampling_ok.hpp:3 includes "kernels/backend.hpp": the engine core is plain state machines: no CAF, no model (never kernels/)' "$tmp/near.log"
check "and the allowed one beside it is not reported" bash -c "! grep -q 'sampling_ok.hpp:2' '$tmp/near.log'"
rm "$tree/engine/sampling_ok.hpp"

# A public header that pulls in CAF.
printf '#pragma once\n#include "caf/all.hpp"\n' >"$tree/include/actorllm/bad_public.hpp"
bash "$src/scripts/check_layers.sh" "$tree" >"$tmp/public.log" 2>&1
check "a public header with CAF fails" grep -q 'include/actorllm/bad_public.hpp:2 includes "caf/all.hpp": public headers' "$tmp/public.log"
rm "$tree/include/actorllm/bad_public.hpp"

# An exception whose include is gone.
echo "util/json_writer.hpp -> kernels/tensor.hpp  # gone" >>"$tree/scripts/layer_exceptions.txt"
bash "$src/scripts/check_layers.sh" "$tree" >"$tmp/stale.log" 2>&1
rc=$?
check "a stale exception fails the check (exit $rc)" test "$rc" -eq 1
check "saying to remove it" grep -q "'util/json_writer.hpp -> kernels/tensor.hpp' is listed in scripts/layer_exceptions.txt but no longer occurs" "$tmp/stale.log"

# The shape rules: a communication file back in kernels/, and a second copy of a shard knob.
touch "$tree/kernels/extra_collective.cpp"
bash "$src/scripts/check_layers.sh" "$tree" >"$tmp/shape.log" 2>&1
rc=$?
check "a collective in kernels/ fails the check (exit $rc)" test "$rc" -eq 1
check "naming the file and where it belongs" grep -q 'kernels/extra_collective.cpp: communication lives in comm/' "$tmp/shape.log"
rm "$tree/kernels/extra_collective.cpp"
printf 'void f(A& a) { a.enforce_eager = true; }\n' >"$tree/actors/runtime/extra_knob.cpp"
bash "$src/scripts/check_layers.sh" "$tree" >"$tmp/knob.log" 2>&1
check "a second enforce_eager copy in actors/ fails" grep -q 'actors/ assigns enforce_eager 2 times' "$tmp/knob.log"
rm "$tree/actors/runtime/extra_knob.cpp"

exit $fail
