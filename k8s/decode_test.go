package k8s

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

const goodDeployment = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: probe
spec:
  replicas: 2
  selector:
    matchLabels: {app: probe}
  template:
    metadata:
      labels: {app: probe}
    spec:
      containers:
        - name: probe
          image: obsops/probe:1
          ports:
            - containerPort: 8080
          resources:
            requests: {cpu: 100m, memory: 64Mi}
`

const goodScaledObject = `
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: worker
spec:
  scaleTargetRef:
    name: worker
  minReplicaCount: 1
  maxReplicaCount: 3
  triggers:
    - type: redis
      metadata:
        address: redis:6379
        listName: "asynq:{ingest}:pending"
        listLength: "10"
`

// TestDecodeAcceptsValidObjects is the control for the negative cases below: the same documents,
// spelled right, decode into the typed values.
func TestDecodeAcceptsValidObjects(t *testing.T) {
	o, err := Decode([]byte(goodDeployment))
	if err != nil {
		t.Fatalf("valid Deployment: %v", err)
	}
	d, ok := o.Value.(*appsv1.Deployment)
	if !ok || *d.Spec.Replicas != 2 || d.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort != 8080 {
		t.Fatalf("decoded %#v", o.Value)
	}
	if got := d.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().MilliValue(); got != 100 {
		t.Fatalf("cpu request %dm, want 100m", got)
	}
	o, err = Decode([]byte(goodScaledObject))
	if err != nil {
		t.Fatalf("valid ScaledObject: %v", err)
	}
	if so := o.Value.(*ScaledObject); so.Spec.ScaleTargetRef.Name != "worker" || so.Spec.Triggers[0].Metadata["listName"] != "asynq:{ingest}:pending" {
		t.Fatalf("decoded %#v", so.Spec)
	}
}

// TestDecodeIsStrict proves the decoder rejects what the API server would reject or silently drop.
func TestDecodeIsStrict(t *testing.T) {
	cases := []struct {
		name, doc, wantErr string
	}{
		{"misspelled field", strings.Replace(goodDeployment, "replicas: 2", "replica: 2", 1), `unknown field "spec.replica"`},
		{"field in the wrong case", strings.Replace(goodDeployment, "containerPort:", "containerport:", 1), `unknown field "spec.template.spec.containers[0].ports[0].containerport"`},
		{"field at the wrong level", strings.Replace(goodDeployment, "  replicas: 2", "  replicas: 2\n  image: x", 1), `unknown field "spec.image"`},
		{"wrong type", strings.Replace(goodDeployment, "replicas: 2", "replicas: two", 1), "cannot unmarshal"},
		{"wrong type in a list", strings.Replace(goodDeployment, "containerPort: 8080", "containerPort: [8080]", 1), "cannot unmarshal"},
		{"bad quantity", strings.Replace(goodDeployment, "cpu: 100m", "cpu: lots", 1), "quantities must match"},
		{"duplicate key", strings.Replace(goodDeployment, "replicas: 2", "replicas: 2\n  replicas: 3", 1), "already set"},
		{"unknown kind", strings.Replace(goodDeployment, "kind: Deployment", "kind: Deploymnet", 1), "unknown kind apps/v1 Deploymnet"},
		{"unknown apiVersion", strings.Replace(goodDeployment, "apps/v1", "apps/v1beta1", 1), "unknown kind apps/v1beta1 Deployment"},
		{"missing kind", strings.Replace(goodDeployment, "kind: Deployment", "", 1), "apiVersion and kind are required"},
		{"missing name", strings.Replace(goodDeployment, "name: probe\nspec", "labels: {}\nspec", 1), "without metadata.name"},
		{"ScaledObject misspelled field", strings.Replace(goodScaledObject, "minReplicaCount", "minReplicas", 1), `unknown field "spec.minReplicas"`},
		{"ScaledObject wrong type", strings.Replace(goodScaledObject, "maxReplicaCount: 3", "maxReplicaCount: \"3\"", 1), "cannot unmarshal"},
		{"ScaledObject trigger metadata not a string map", strings.Replace(goodScaledObject, `listLength: "10"`, "listLength: 10", 1), "cannot unmarshal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.doc == goodDeployment || tc.doc == goodScaledObject {
				t.Fatalf("the replacement did not apply: the case tests nothing")
			}
			_, err := Decode([]byte(tc.doc))
			if err == nil {
				t.Fatalf("decoded without error:\n%s", tc.doc)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestDecodeAllReportsEveryBadDocument(t *testing.T) {
	stream := goodDeployment + "---\n" + strings.Replace(goodDeployment, "replicas: 2", "replica: 2", 1) +
		"---\n" + strings.Replace(goodScaledObject, "triggers:", "trigger:", 1)
	objs, err := DecodeAll([]byte(stream))
	if err == nil {
		t.Fatal("no error for two bad documents")
	}
	if !strings.Contains(err.Error(), "document 2") || !strings.Contains(err.Error(), "document 3") {
		t.Fatalf("error does not name both documents: %v", err)
	}
	if len(objs) != 1 {
		t.Fatalf("decoded %d objects, want the one good one", len(objs))
	}
}
