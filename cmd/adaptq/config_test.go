package main

import (
	"os"
	"reflect"
	"regexp"
	"testing"

	"github.com/adaptq/adaptq"
)

const referenceConfig = "../../configs/adaptq.yaml"

// The reference config is the defaults, written out: loading it gives
// what leaving every key out gives, but for the queue's own keys.
func TestReferenceConfigHoldsTheDefaults(t *testing.T) {
	t.Parallel()
	cfg, err := adaptq.LoadConfig(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	def := adaptq.DefaultConfig()
	if !reflect.DeepEqual(cfg.Log, def.Log) || !reflect.DeepEqual(cfg.Admin, def.Admin) || cfg.PricePer10k != def.PricePer10k {
		t.Errorf("log, admin, price: %+v %+v %v, want the defaults %+v %+v %v", cfg.Log, cfg.Admin, cfg.PricePer10k, def.Log, def.Admin, def.PricePer10k)
	}
	if len(cfg.Queues) != 1 {
		t.Fatalf("%d queues", len(cfg.Queues))
	}
	q := cfg.Queues[0]
	want := adaptq.DefaultQueueConfig()
	want.Name, want.URL, want.Handler, want.PoisonQueue = q.Name, q.URL, q.Handler, q.Name+adaptq.PoisonSuffix
	if !reflect.DeepEqual(q, want) {
		t.Errorf("queues[0]:\n got %+v\nwant %+v", q, want)
	}
}

// Every config key appears in the reference config, with its comment.
func TestReferenceConfigShowsEveryKey(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(referenceConfig)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(reflect.Type, string)
	walk = func(typ reflect.Type, at string) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if !f.IsExported() {
				continue // not a key
			}
			key := f.Tag.Get("yaml")
			if !regexp.MustCompile(`(^|[\s{#-])` + key + `:`).Match(data) {
				t.Errorf("%s%s is not in %s", at, key, referenceConfig)
			}
			ft := f.Type
			if ft.Kind() == reflect.Slice || ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				walk(ft, at+key+".")
			}
		}
	}
	walk(reflect.TypeOf(adaptq.Config{}), "")
}
