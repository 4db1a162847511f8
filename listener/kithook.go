package listener

import "github.com/adaptq/adaptq/internal/kithook"

func init() {
	kithook.Activity = func(v any) (parked, busy int) {
		l := v.(*Listener)
		return int(l.parked.Load()), int(l.busy.Load())
	}
}
