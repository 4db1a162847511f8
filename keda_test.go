package adaptq

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"testing"

	"github.com/tidwall/gjson"
	"go.yaml.in/yaml/v3"

	"github.com/adaptq/adaptq/admin"
	"github.com/adaptq/adaptq/internal/clock"
)

const kedaExample = "configs/keda/scaledobject.yaml"

// kedaDoc is the part of a Kubernetes object the test reads.
type kedaDoc struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	StringData map[string]string `yaml:"stringData"`
	Data       map[string]string `yaml:"data"`
	Spec       struct {
		MinReplicaCount int `yaml:"minReplicaCount"`
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
	} `yaml:"spec"`
}

func loadKEDAExample(t *testing.T) map[string]kedaDoc {
	t.Helper()
	docs := map[string]kedaDoc{}
	for _, d := range yamlDocs[kedaDoc](t, kedaExample) {
		docs[d.Kind] = d
	}
	return docs
}

// yamlDocs decodes every document of the YAML file at path.
func yamlDocs[T any](t *testing.T, path string) []T {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []T
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var d T
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	}
	return docs
}

// The KEDA example's metrics-api trigger, fed a real answer of a running
// worker: its url names the scaling signal, its valueLocation (GJSON, as
// KEDA reads it) finds the worker's desired instances, and KEDA's
// AverageValue rule, ceil(value / targetValue), gives that many replicas.
// The bearer token comes from the Secret through the TriggerAuthentication.
func TestKEDAExampleReadsTheScalingSignal(t *testing.T) {
	t.Parallel()
	docs := loadKEDAExample(t)
	so, ok := docs["ScaledObject"]
	if !ok || len(so.Spec.Triggers) != 1 {
		t.Fatalf("%s: no ScaledObject with one trigger: %+v", kedaExample, so)
	}
	tr := so.Spec.Triggers[0]
	md := tr.Metadata
	if tr.Type != "metrics-api" || tr.MetricType != "AverageValue" || md["authMode"] != "bearer" || md["format"] != "json" {
		t.Fatalf("trigger %+v: want a metrics-api trigger, AverageValue, json, bearer auth", tr)
	}
	if so.Spec.MinReplicaCount < 1 {
		t.Errorf("minReplicaCount %d: the workers serve the signal, at least one must run", so.Spec.MinReplicaCount)
	}
	auth := docs["TriggerAuthentication"]
	if auth.Metadata.Name != tr.AuthenticationRef.Name || len(auth.Spec.SecretTargetRef) != 1 {
		t.Fatalf("authenticationRef %q does not name the TriggerAuthentication %+v", tr.AuthenticationRef.Name, auth)
	}
	ref := auth.Spec.SecretTargetRef[0]
	if ref.Parameter != "token" || ref.Name != "adaptq-admin" || ref.Key != "token" {
		t.Fatalf("secretTargetRef %+v does not give the bearer token from the Secret adaptq-admin, key token", ref)
	}
	// The example holds no token: a placeholder in it ends up deployed.
	// The operator creates the Secret with a random one, as its comment
	// says; the worker refuses a placeholder (TestWeakAdminTokensAreRefused).
	for kind, d := range docs {
		if len(d.StringData) > 0 || len(d.Data) > 0 {
			t.Errorf("%s: the %s %q holds a literal secret; reference one created with a random token instead", kedaExample, kind, d.Metadata.Name)
		}
	}
	if data, _ := os.ReadFile(kedaExample); !bytes.Contains(data, []byte("kubectl create secret generic adaptq-admin --from-literal=token=\"$(openssl rand -hex 32)\"")) {
		t.Errorf("%s does not say how to create the Secret with a random token", kedaExample)
	}
	token := rand.Text() // what openssl rand makes: random, long enough
	u, err := url.Parse(md["url"])
	if err != nil || u.Path != admin.ScalingPath {
		t.Fatalf("url %q is not the scaling signal %s", md["url"], admin.ScalingPath)
	}
	target, err := strconv.ParseFloat(md["targetValue"], 64)
	if err != nil || target <= 0 {
		t.Fatalf("targetValue %q: %v", md["targetValue"], err)
	}

	// A worker with the example's token and 450 messages waiting, held:
	// 100 an instance asks for 5.
	qurl := "memory://" + uniqueQueue("keda-example")
	putN(t, qurl, 450)
	w := gatedWorker(t, `
admin: {address: "127.0.0.1:0", token: "`+token+`"}
queues:
  - url: `+qurl+`
    handler: work
    instances: {messages_per_instance: 100}
`, clock.Real, 0)
	req, err := http.NewRequest(http.MethodGet, "http://"+w.AdminAddress()+u.Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token) // what authMode bearer sends
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %v\n%s", u.Path, resp.Status, err, body)
	}
	// KEDA's JSON format: a number, or a string it parses as a Quantity.
	// The signal gives a number.
	v := gjson.GetBytes(body, md["valueLocation"])
	if v.Type != gjson.Number {
		t.Fatalf("valueLocation %q finds %s in\n%s", md["valueLocation"], v.Type, body)
	}
	if replicas := int(math.Ceil(v.Num / target)); replicas != 5 {
		t.Errorf("KEDA would ask for %d replicas (value %v, target %v), want 5:\n%s", replicas, v.Num, target, body)
	}
}
