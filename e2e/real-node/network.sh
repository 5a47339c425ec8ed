#!/usr/bin/env bash
# The real node's network guard: Pod traffic stays on this machine.
#
#   network.sh install   add the drop rules (idempotent: removes ours first)
#   network.sh remove    delete every rule and chain this script added
#   network.sh check     read the rules back and compare them with what must be
#                        there; exit 1 naming what differs (never sends a packet)
#   network.sh leftovers print any rule or chain of ours still present (for `down`)
#
# Pods sit on the bridge tfjob0 (10.88.0.0/16, the node is 10.88.0.1) and
# have no default route (their CNI config routes only the Service range
# 10.0.0.0/24 through the node). On top of that, rules in iptables' mangle
# table, which kube-proxy never touches and which every packet crosses before
# NAT and after routing, drop:
#   - in PREROUTING, a packet coming in from tfjob0 bound for anything but the
#     Pod range or the Service range (before kube-proxy's DNAT);
#   - in POSTROUTING, a packet from the Pod range leaving by any interface but
#     tfjob0 or lo (after DNAT: a Service whose endpoint is off the machine);
# and in the filter table, first in FORWARD and INPUT, a second layer: nothing
# from tfjob0 is forwarded anywhere but tfjob0, nothing from tfjob0 is
# delivered to the host except at the node's own address 10.88.0.1, and nothing
# is forwarded into tfjob0 from elsewhere. The host itself may not send to
# KWOK's fake Pod range 10.244.0.0/16 (kube-proxy would otherwise route a
# Service of fake Pods off the machine). IPv6 from and to tfjob0 is dropped.
set -euo pipefail
# shellcheck source=e2e/real-node/network.env
source "$(dirname "$0")/network.env"

# table chain hook position: each of our chains and where it is jumped to from.
HOOKS=(
  "mangle TFJOB-RN-PRE PREROUTING"
  "mangle TFJOB-RN-POST POSTROUTING"
  "filter TFJOB-RN-FWD FORWARD"
  "filter TFJOB-RN-IN INPUT"
  "filter TFJOB-RN-OUT OUTPUT"
)

# The rules of each chain, in order, as `iptables -S` prints them.
rules_of() {
  local b="$BRIDGE" pods="$POD_CIDR" svcs="$SERVICE_CIDR"
  case "$1" in
    TFJOB-RN-PRE)
      echo "-A TFJOB-RN-PRE -d $pods -i $b -j RETURN"
      echo "-A TFJOB-RN-PRE -d $svcs -i $b -j RETURN"
      echo "-A TFJOB-RN-PRE -i $b -j DROP"
      ;;
    TFJOB-RN-POST)
      echo "-A TFJOB-RN-POST -s $pods -o $b -j RETURN"
      echo "-A TFJOB-RN-POST -s $pods -o lo -j RETURN"
      echo "-A TFJOB-RN-POST -s $pods -j DROP"
      ;;
    TFJOB-RN-FWD)
      echo "-A TFJOB-RN-FWD -s $pods -d $pods -i $b -o $b -j RETURN"
      echo "-A TFJOB-RN-FWD -i $b -j DROP"
      echo "-A TFJOB-RN-FWD -o $b -j DROP"
      ;;
    TFJOB-RN-IN)
      echo "-A TFJOB-RN-IN -d $NODE_IP/32 -i $b -j RETURN"
      echo "-A TFJOB-RN-IN -i $b -j DROP"
      ;;
    TFJOB-RN-OUT)
      echo "-A TFJOB-RN-OUT -d $KWOK_POD_CIDR -j DROP"
      ;;
  esac
}

HOOKS6=("filter TFJOB-RN6-FWD FORWARD" "filter TFJOB-RN6-IN INPUT")
rules6_of() {
  case "$1" in
    TFJOB-RN6-FWD)
      echo "-A TFJOB-RN6-FWD -i $BRIDGE -j DROP"
      echo "-A TFJOB-RN6-FWD -o $BRIDGE -j DROP"
      ;;
    TFJOB-RN6-IN) echo "-A TFJOB-RN6-IN -i $BRIDGE -j DROP" ;;
  esac
}

# `iptables -w`: wait for the xtables lock kube-proxy also takes.
ipt() { iptables -w 5 "$@"; }
ip6t() { ip6tables -w 5 "$@"; }

remove_with() {
  local cmd="$1" hook table chain parent
  shift
  for hook in "$@"; do
    read -r table chain parent <<<"$hook"
    while $cmd -t "$table" -D "$parent" -j "$chain" 2>/dev/null; do :; done
    $cmd -t "$table" -F "$chain" 2>/dev/null || true
    $cmd -t "$table" -X "$chain" 2>/dev/null || true
  done
}

install_with() {
  local cmd="$1" rules="$2" hook table chain parent rule
  shift 2
  for hook in "$@"; do
    read -r table chain parent <<<"$hook"
    $cmd -t "$table" -N "$chain"
    while read -r rule; do
      # shellcheck disable=SC2086 # a rule is words
      $cmd -t "$table" ${rule} 
    done < <($rules "$chain")
    $cmd -t "$table" -I "$parent" 1 -j "$chain"
  done
}

cmd_install() {
  cmd_remove
  install_with ipt rules_of "${HOOKS[@]}"
  install_with ip6t rules6_of "${HOOKS6[@]}"
}

cmd_remove() {
  remove_with ipt "${HOOKS[@]}"
  remove_with ip6t "${HOOKS6[@]}"
}

# Compares each chain with its expected rules, and checks that the jump to it
# is the first rule of its parent (nothing kube-proxy adds can accept a packet
# before ours sees it).
check_with() {
  local cmd="$1" rules="$2" hook table chain parent bad=0 want got first
  shift 2
  for hook in "$@"; do
    read -r table chain parent <<<"$hook"
    want=$(echo "-N $chain"; $rules "$chain")
    got=$($cmd -t "$table" -S "$chain" 2>&1) || got="(no chain: $got)"
    if [[ "$got" != "$want" ]]; then
      echo "$cmd -t $table $chain differs from what network.sh installs:" >&2
      diff <(echo "$want") <(echo "$got") >&2 || true
      bad=1
    fi
    first=$($cmd -t "$table" -S "$parent" | sed -n 2p)
    if [[ "$first" != "-A $parent -j $chain" ]]; then
      echo "$cmd -t $table $parent: the first rule is '$first', not the jump to $chain" >&2
      bad=1
    fi
  done
  return "$bad"
}

cmd_check() {
  local bad=0
  check_with ipt rules_of "${HOOKS[@]}" || bad=1
  check_with ip6t rules6_of "${HOOKS6[@]}" || bad=1
  # No default route for Pods: the CNI config routes the Service range only.
  if grep -q '"dst": *"0.0.0.0/0"' "${CNI_CONF:-/dev/null}" 2>/dev/null || grep -q '"isDefaultGateway": *true' "${CNI_CONF:-/dev/null}" 2>/dev/null; then
    echo "$CNI_CONF gives Pods a default route" >&2
    bad=1
  fi
  if ((bad)); then
    echo "network.sh check: the rules are NOT as they must be" >&2
    return 1
  fi
  echo "network.sh check: Pod traffic is confined to $POD_CIDR, $SERVICE_CIDR and the node $NODE_IP (rules read back)"
}

cmd_leftovers() {
  local hook table chain parent
  for hook in "${HOOKS[@]}"; do
    read -r table chain parent <<<"$hook"
    ipt -t "$table" -S "$chain" >/dev/null 2>&1 && echo "iptables -t $table chain $chain"
  done
  for hook in "${HOOKS6[@]}"; do
    read -r table chain parent <<<"$hook"
    ip6t -t "$table" -S "$chain" >/dev/null 2>&1 && echo "ip6tables -t $table chain $chain"
  done
  return 0
}

case "${1:-}" in
  install) cmd_install ;;
  remove) cmd_remove ;;
  check) cmd_check ;;
  leftovers) cmd_leftovers ;;
  *) echo "usage: network.sh install|remove|check|leftovers" >&2; exit 2 ;;
esac
