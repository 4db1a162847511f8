package listener

import "github.com/adaptq/adaptq/internal/kithook"

func init() {
	kithook.Parked = func(l any) int { return int(l.(*Listener).parked.Load()) }
}
