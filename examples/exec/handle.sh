#!/bin/sh
# handle.sh: the exec example's handler. adaptq runs it once per message of
# the payments queue, with the body on standard input and the message's id
# and delivery count in ADAPTQ_MESSAGE_ID and ADAPTQ_DEQUEUE_COUNT.
#
# A body is a payment, "ORDER AMOUNT" (e.g. "A-1001 19.99"). The script
# records each one in a ledger, one line "ID<TAB>ORDER AMOUNT" per message.
#
# Exit codes are the contract with adaptq:
#   0   done: adaptq deletes the message.
#   65  (EX_DATAERR) the body is malformed and no retry can fix it: a
#       permanent failure; adaptq moves the message to the poison queue
#       (payments-poison) instead of retrying it.
#   any other: a transient failure; the message is delivered again once its
#       visibility timeout ends.
set -eu

ledger=${LEDGER:-./data/exec-example/ledger.txt}
id=${ADAPTQ_MESSAGE_ID:?run me from adaptq: ADAPTQ_MESSAGE_ID is not set}
body=$(cat)

nl='
'
case $body in
"" | *"$nl"*) malformed=1 ;;
*) if printf '%s\n' "$body" | grep -Eq '^[A-Za-z0-9-]+ [0-9]+(\.[0-9]{1,2})?$'; then malformed=0; else malformed=1; fi ;;
esac
if [ "$malformed" = 1 ]; then
	# The reason goes to standard error, last: adaptq keeps its tail.
	echo "message $id: malformed payment (want \"ORDER AMOUNT\", e.g. \"A-1001 19.99\")" >&2
	exit 65
fi

# Delivery is at least once: this message may have been recorded by an
# earlier delivery whose delete was lost (a crash, a timeout). Key the side
# effect on the message id, which every delivery shares, and do it once.
# (A real handler would make check-and-record one step: an upsert keyed by
# the id, or an idempotency key sent to the payment API.)
mkdir -p "$(dirname "$ledger")"
touch "$ledger"
if awk -F '\t' -v id="$id" '$1 == id { found = 1 } END { exit !found }' "$ledger"; then
	echo "message $id (try $ADAPTQ_DEQUEUE_COUNT): already recorded, nothing to do"
	exit 0
fi
printf '%s\t%s\n' "$id" "$body" >>"$ledger"
echo "message $id (try $ADAPTQ_DEQUEUE_COUNT): recorded $body"
