package adaptq

import (
	"crypto/rand"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tidwall/gjson"
	"go.yaml.in/yaml/v3"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
	"github.com/adaptq/adaptq/listener"
)

// The scale-to-zero example's files.
const (
	kedaZeroExample = "configs/keda/scaledobject-zero.yaml"
	kedaScaler      = "configs/keda/scaler.yaml"
	kedaWorker      = "configs/keda/worker.yaml"
)

// k8sDoc is the part of the Kubernetes objects of the scale-to-zero
// example the tests read.
type k8sDoc struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	StringData map[string]string `yaml:"stringData"`
	Data       map[string]string `yaml:"data"`
	Spec       struct {
		SecretTargetRef []struct {
			Parameter, Name, Key string
		} `yaml:"secretTargetRef"`
		Triggers []struct {
			Type              string            `yaml:"type"`
			MetricType        string            `yaml:"metricType"`
			Metadata          map[string]string `yaml:"metadata"`
			AuthenticationRef struct {
				Name string `yaml:"name"`
			} `yaml:"authenticationRef"`
		} `yaml:"triggers"`
		MinReplicaCount *int `yaml:"minReplicaCount"`
		Replicas        *int `yaml:"replicas"`
		ScaleTargetRef  struct {
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		Ports []struct {
			Port int `yaml:"port"`
		} `yaml:"ports"`
		Template struct {
			Spec struct {
				TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
				Containers                    []struct {
					Command   []string `yaml:"command"`
					Lifecycle struct {
						PreStop *struct {
							Sleep *struct {
								Seconds int `yaml:"seconds"`
							} `yaml:"sleep"`
						} `yaml:"preStop"`
					} `yaml:"lifecycle"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

// k8sObjects loads path's objects by "Kind/name".
func k8sObjects(t *testing.T, path string) map[string]k8sDoc {
	t.Helper()
	docs := map[string]k8sDoc{}
	for _, d := range yamlDocs[k8sDoc](t, path) {
		docs[d.Kind+"/"+d.Metadata.Name] = d
	}
	return docs
}

// The scale-to-zero example against a real scaler: the ScaledObject lets
// the workers go to zero, scales them and not the scaler, reads the
// scaler's Service with the token from the Secret, and its valueLocation
// finds 0 in the answer for empty queues (KEDA deactivates: the value is
// not above activationTargetValue, 0 by default) and N for a backlog.
func TestKEDAZeroExampleReadsTheScaler(t *testing.T) {
	t.Parallel()
	zero := k8sObjects(t, kedaZeroExample)
	so, ok := zero["ScaledObject/adaptq-worker"]
	if !ok || len(so.Spec.Triggers) != 1 {
		t.Fatalf("%s: no ScaledObject adaptq-worker with one trigger", kedaZeroExample)
	}
	if m := so.Spec.MinReplicaCount; m == nil || *m != 0 {
		t.Fatalf("%s: minReplicaCount not 0 (KEDA's default is 0, but the example says it)", kedaZeroExample)
	}
	tr := so.Spec.Triggers[0]
	md := tr.Metadata
	if tr.Type != "metrics-api" || tr.MetricType != "AverageValue" || md["authMode"] != "bearer" || md["format"] != "json" {
		t.Fatalf("trigger %+v: want a metrics-api trigger, AverageValue, json, bearer auth", tr)
	}
	if _, set := md["activationTargetValue"]; set {
		t.Fatalf("activationTargetValue %q: the example relies on KEDA's default, 0", md["activationTargetValue"])
	}
	auth := zero["TriggerAuthentication/"+tr.AuthenticationRef.Name]
	if len(auth.Spec.SecretTargetRef) != 1 || auth.Spec.SecretTargetRef[0].Name != "adaptq-admin" || auth.Spec.SecretTargetRef[0].Parameter != "token" {
		t.Fatalf("authenticationRef %q: no TriggerAuthentication giving the token of the Secret adaptq-admin", tr.AuthenticationRef.Name)
	}
	scaler, worker := k8sObjects(t, kedaScaler), k8sObjects(t, kedaWorker)
	for _, files := range []map[string]k8sDoc{zero, scaler, worker} {
		for k, d := range files {
			if len(d.StringData) > 0 || (d.Kind == "Secret" && len(d.Data) > 0) {
				t.Errorf("%s holds a literal secret; reference one created with a random token instead", k)
			}
		}
	}
	if so.Spec.ScaleTargetRef.Name != "adaptq-worker" || worker["Deployment/adaptq-worker"].Kind == "" {
		t.Errorf("scaleTargetRef %q: want the workers' Deployment adaptq-worker (%s)", so.Spec.ScaleTargetRef.Name, kedaWorker)
	}
	dep, svc := scaler["Deployment/adaptq-scaler"], scaler["Service/adaptq-scaler"]
	if so.Spec.ScaleTargetRef.Name == dep.Metadata.Name {
		t.Errorf("the ScaledObject scales the scaler: at zero nothing would answer")
	}
	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 1 || len(dep.Spec.Template.Spec.Containers) != 1 ||
		!slices.Equal(dep.Spec.Template.Spec.Containers[0].Command[:2], []string{"adaptq", "scaler"}) {
		t.Errorf("%s: want one replica running `adaptq scaler`: %+v", kedaScaler, dep.Spec)
	}
	u, err := url.Parse(md["url"])
	if err != nil || u.Path != admin.ScalingPath || len(svc.Spec.Ports) != 1 || u.Host != svc.Metadata.Name+":"+strconv.Itoa(svc.Spec.Ports[0].Port) {
		t.Fatalf("url %q: want the scaler's Service %q, path %s", md["url"], svc.Metadata.Name, admin.ScalingPath)
	}
	target, err := strconv.ParseFloat(md["targetValue"], 64)
	if err != nil || target <= 0 {
		t.Fatalf("targetValue %q: %v", md["targetValue"], err)
	}

	// A scaler with a random token, as the Secret holds, on two queues.
	token := rand.Text()
	orders, audit := uniqueQueue("keda-zero-orders"), uniqueQueue("keda-zero-audit")
	fake := clock.NewFake(time.Time{})
	s := startScaler(t, `
admin: {address: "127.0.0.1:0", token: "`+token+`"}
queues:
  - url: memory://`+orders+`
    handler: 'exec: cat'
    instances: {messages_per_instance: 100, max: 20}
  - url: memory://`+audit+`
    handler: 'exec: cat'
`, withClock(fake))
	replicas := func(what string, want int, active bool) {
		t.Helper()
		resp, body := adminSend(t, s.Address(), http.MethodGet, u.Path, nil, "Authorization", "Bearer "+token) // what authMode bearer sends
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: GET %s: %s\n%s", what, u.Path, resp.Status, body)
		}
		v := gjson.GetBytes(body, md["valueLocation"])
		if v.Type != gjson.Number {
			t.Fatalf("%s: valueLocation %q finds %s in\n%s", what, md["valueLocation"], v.Type, body)
		}
		if got := v.Num > 0; got != active {
			t.Errorf("%s: value %v: KEDA active %v, want %v\n%s", what, v.Num, got, active, body)
		}
		if got := int(math.Ceil(v.Num / target)); active && got != want {
			t.Errorf("%s: KEDA would ask for %d replicas (value %v, target %v), want %d:\n%s", what, got, v.Num, target, want, body)
		}
		fake.Advance(ScalerDepthIntervalFree)
	}
	replicas("both queues empty", 0, false)
	putN(t, "memory://"+audit, 1)
	replicas("one audit message, no order", 1, true) // the value is the most any queue asks for
	putN(t, "memory://"+orders, 450)
	replicas("and 450 orders at 100 an instance", 5, true)
}

// The worker's Deployment lets a scale-in finish every handler: its
// terminationGracePeriodSeconds covers the preStop hook, the config's
// shutdown_grace and the last deletes' listener.DefaultDeleteTimeout, no handler_timeout exceeds shutdown_grace, and
// adaptq is the container's process 1 (the exec form), which receives
// SIGTERM. The config is the ConfigMap's, parsed as the worker parses it.
func TestKEDAWorkerDeploymentDrainsBeforeItIsKilled(t *testing.T) {
	t.Parallel()
	worker := k8sObjects(t, kedaWorker)
	cm, dep := worker["ConfigMap/adaptq-config"], worker["Deployment/adaptq-worker"]
	// The queues' timings as the worker reads them, defaults included
	// (ParseConfig would need the token's variable and the postgres
	// driver, which this package's tests must not import).
	var cfg struct {
		Queues []struct {
			HandlerTimeout time.Duration `yaml:"handler_timeout"`
			ShutdownGrace  time.Duration `yaml:"shutdown_grace"`
			Instances      struct {
				Max int `yaml:"max"`
			} `yaml:"instances"`
		} `yaml:"queues"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["adaptq.yaml"]), &cfg); err != nil || len(cfg.Queues) == 0 {
		t.Fatalf("%s: adaptq-config: %v (%d queues)", kedaWorker, err, len(cfg.Queues))
	}
	for i := range cfg.Queues {
		if cfg.Queues[i].ShutdownGrace == 0 {
			cfg.Queues[i].ShutdownGrace = DefaultQueueConfig().ShutdownGrace
		}
	}
	if dep.Spec.Replicas != nil {
		t.Errorf("%s: replicas %d: KEDA owns the count; a fixed one is reset at every apply", kedaWorker, *dep.Spec.Replicas)
	}
	ps := dep.Spec.Template.Spec
	if ps.TerminationGracePeriodSeconds == nil || len(ps.Containers) != 1 {
		t.Fatalf("%s: no terminationGracePeriodSeconds, or not one container", kedaWorker)
	}
	c := ps.Containers[0]
	if len(c.Command) < 2 || c.Command[0] != "adaptq" || c.Command[1] != "run" {
		t.Errorf("command %q: want adaptq run in the exec form (process 1 gets SIGTERM)", c.Command)
	}
	var preStop time.Duration
	if h := c.Lifecycle.PreStop; h != nil {
		if h.Sleep == nil {
			t.Fatalf("a preStop hook this test cannot time: %+v", h)
		}
		preStop = time.Duration(h.Sleep.Seconds) * time.Second
	}
	grace := time.Duration(*ps.TerminationGracePeriodSeconds) * time.Second
	for i, q := range cfg.Queues {
		if need := preStop + q.ShutdownGrace + listener.DefaultDeleteTimeout; grace < need {
			t.Errorf("queues[%d]: terminationGracePeriodSeconds %s < preStop %s + shutdown_grace %s + the last deletes' %s", i, grace, preStop, q.ShutdownGrace, listener.DefaultDeleteTimeout)
		}
		if q.HandlerTimeout == 0 || q.HandlerTimeout > q.ShutdownGrace {
			t.Errorf("queues[%d]: handler_timeout %s: want one, at most shutdown_grace %s, or a scale-in may cut a handler", i, q.HandlerTimeout, q.ShutdownGrace)
		}
	}
	// The queues the scaler reads are the workers': the same ConfigMap.
	if s := k8sObjects(t, kedaScaler)["Deployment/adaptq-scaler"]; len(s.Spec.Template.Spec.Containers) != 1 || !slices.Contains(s.Spec.Template.Spec.Containers[0].Command, "/etc/adaptq/adaptq.yaml") {
		t.Errorf("%s: the scaler does not read the workers' config", kedaScaler)
	}
	if cfg.Queues[0].Instances.Max == 0 {
		t.Errorf("instances.max unset: a flood would ask for a worker per messages_per_instance, without bound")
	}
}
