#!/usr/bin/env bash
# The headers' citations of docs/semantics.md point at parts that exist, and no header cites the old SEMANTICS.md.
#
# usage: check_semantics_refs.sh SOURCE_ROOT [--pending HEADER...]
#        check_semantics_refs.sh --selftest SOURCE_ROOT
#
# For every accel*.h in SOURCE_ROOT:
#   - a header that mentions SEMANTICS (SEMANTICS.md, "SEMANTICS §6", ...) fails the test, unless it is listed after
#     --pending (a header whose owner has not converted its citations yet: reported, not checked further). A
#     pending header that no longer mentions SEMANTICS also fails: take it off the list, so the list cannot go stale.
#   - in every other header, each section number (§N, §§N-M, "docs/semantics.md section N") must be a "## §N"
#     heading of docs/semantics.md, each policy number ("policy N", "policies N, M and K", "policies N-M") must be an
#     item of its "## Policies" list, and a reference to "Policies" needs that heading.
# --selftest runs the check on made-up headers (a missing section, a missing policy, an old citation, a stale
# pending entry, a clean header) and fails unless each verdict is the expected one.
set -u
export LC_ALL=C

check() {
    local root=$1
    shift
    local pending=()
    if [ "${1:-}" = "--pending" ]; then
        shift
        pending=("$@")
    fi
    local doc=$root/docs/semantics.md
    local fail=0 h base sections policies nums n is_pending p
    if [ ! -f "$doc" ]; then
        echo "FAIL: $doc does not exist"
        return 1
    fi
    sections=" $(grep -E '^## §[0-9]+ ' "$doc" | sed -E 's/^## §([0-9]+) .*/\1/' | tr '\n' ' ')"
    policies=" $(awk '/^## Policies/ { p = 1; next } /^## / { p = 0 } p && /^[0-9]+\. \*\*/ { sub(/\..*/, ""); print }' \
                 "$doc" | tr '\n' ' ')"
    echo "docs/semantics.md: sections [${sections# }] policies [${policies# }]"
    if [ "$sections" = " " ] || [ "$policies" = " " ]; then
        echo "FAIL: no numbered sections or policies found in $doc"
        return 1
    fi
    for p in ${pending[@]+"${pending[@]}"}; do
        if [ ! -f "$root/$p" ]; then
            echo "FAIL: pending header $p does not exist"
            fail=1
        fi
    done
    for h in "$root"/accel*.h; do
        [ -f "$h" ] || continue
        base=$(basename "$h")
        is_pending=0
        for p in ${pending[@]+"${pending[@]}"}; do [ "$p" = "$base" ] && is_pending=1; done
        if grep -q 'SEMANTICS' "$h"; then
            if [ $is_pending = 1 ]; then
                echo "PENDING: $base still cites SEMANTICS.md (not checked):"
                grep -n 'SEMANTICS' "$h" | sed 's/^/    /'
            else
                echo "FAIL: $base cites SEMANTICS.md (cite docs/semantics.md §N / policy N):"
                grep -n 'SEMANTICS' "$h" | sed 's/^/    /'
                fail=1
            fi
            continue
        fi
        if [ $is_pending = 1 ]; then
            echo "FAIL: $base no longer cites SEMANTICS.md: remove it from the --pending list (tests/docs/meson.build)"
            fail=1
        fi
        # section numbers: §3, § 3, §§1-2, §1–2, "semantics.md section 6"
        nums=$( { grep -oE '§+ ?[0-9]+([-–][0-9]+)?' "$h"; grep -oiE 'semantics\.md section [0-9]+' "$h"; } |
                grep -oE '[0-9]+' | sort -un)
        for n in $nums; do
            case "$sections" in
            *" $n "*) ;;
            *) echo "FAIL: $base cites §$n, which docs/semantics.md does not have:"
               grep -nE "§+ ?([0-9]+[-–])?$n([^0-9]|\$)|section $n([^0-9]|\$)" "$h" | sed 's/^/    /'
               fail=1 ;;
            esac
        done
        # policy numbers: policy 3, Policy 3, policies 1, 2 and 4, policies 5-7
        nums=$(grep -oiE 'polic(y|ies) [0-9]+(( ?, ?| and | or | ?[-–] ?)[0-9]+)*' "$h" | grep -oE '[0-9]+' | sort -un)
        for n in $nums; do
            case "$policies" in
            *" $n "*) ;;
            *) echo "FAIL: $base cites policy $n, which docs/semantics.md does not have:"
               grep -niE "polic(y|ies) ([0-9]+[^0-9]+)*$n([^0-9]|\$)" "$h" | sed 's/^/    /'
               fail=1 ;;
            esac
        done
        if grep -q 'semantics\.md "Policies"' "$h" && ! grep -q '^## Policies' "$doc"; then
            echo "FAIL: $base cites docs/semantics.md \"Policies\", which has no such heading"
            fail=1
        fi
        echo "ok: $base"
    done
    return $fail
}

selftest() {
    local root=$1 tmp verdict bad=0
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' RETURN
    mkdir -p "$tmp/docs"
    cp "$root/docs/semantics.md" "$tmp/docs/semantics.md"
    expect() { # expect WANT(0|1) WHAT [args...]
        local want=$1 what=$2
        shift 2
        check "$tmp" "$@" > "$tmp/out" 2>&1
        verdict=$?
        if [ $verdict != "$want" ]; then
            echo "SELFTEST FAIL: $what: exit $verdict, expected $want"
            sed 's/^/    /' "$tmp/out"
            bad=1
        else
            echo "selftest ok: $what"
        fi
    }
    printf '/* see docs/semantics.md §3, §§1-2, policy 4, policies 1, 2 and 7 and "Policies" */\n' > "$tmp/accel_a.h"
    expect 0 "valid citations pass"
    printf '/* docs/semantics.md §99 */\n' > "$tmp/accel_b.h"
    expect 1 "a missing section fails"
    printf '/* nothing */\n' > "$tmp/accel_b.h"
    printf '/* docs/semantics.md policies 2 and 99 */\n' > "$tmp/accel_c.h"
    expect 1 "a missing policy fails"
    printf '/* nothing */\n' > "$tmp/accel_c.h"
    printf '/* docs/semantics.md §1-99 */\n' > "$tmp/accel_d.h"
    expect 1 "a range ending past the last section fails"
    printf '/* nothing */\n' > "$tmp/accel_d.h"
    printf '/* SEMANTICS.md policy 6 */\n' > "$tmp/accel_e.h"
    expect 1 "an old SEMANTICS.md citation fails"
    expect 0 "an old citation in a pending header passes" --pending accel_e.h
    expect 1 "a stale pending entry fails" --pending accel_e.h accel_a.h
    expect 1 "a pending header that does not exist fails" --pending accel_e.h accel_zz.h
    printf '/* docs/semantics.md policy 3 */\n' > "$tmp/accel_e.h"
    expect 0 "all converted passes"
    return $bad
}

if [ "${1:-}" = "--selftest" ]; then
    selftest "$2"
    exit $?
fi
check "$@"
