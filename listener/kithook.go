package listener

import "github.com/adaptq/adaptq/internal/kithook"

func init() {
	kithook.Activity = func(v any) (parked, busy, held int) {
		l := v.(*Listener)
		// Read held first: a held message that the pause's end releases
		// is then seen running, not waiting.
		held, hb := int(l.held.Load()), int(l.heldBatches.Load())
		return int(l.parked.Load()), int(l.busy.Load()) - hb, held
	}
}
