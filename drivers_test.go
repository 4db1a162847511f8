package adaptq

// The root package imports no driver: its tests import the ones they use
// (azure_entra_config_test.go adds azure).
import (
	_ "github.com/adaptq/adaptq/queue/memory"
	_ "github.com/adaptq/adaptq/queue/sqlite"
)
