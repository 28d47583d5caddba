// Package k8s holds the Kubernetes manifests of obsops (Kustomize base/, components/ and
// overlays/) and the offline tooling that validates them: Render builds an overlay in-process
// with the Kustomize API (no kubectl, no cluster), and Decode strict-decodes every rendered
// object into its Kubernetes API type, so a misspelled field, a field in the wrong place or a
// value of the wrong type fails instead of being silently dropped by the API server.
package k8s

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Render builds the kustomization in dir (an overlay such as overlays/prod) from the files on
// disk, exactly as `kubectl kustomize dir` would, and returns the multi-document YAML.
func Render(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return resources.AsYaml()
}

// SplitDocuments splits a multi-document YAML stream on its "---" separators, dropping empty
// documents.
func SplitDocuments(stream []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 || string(bytes.TrimSpace(doc)) == "---" {
			continue
		}
		docs = append(docs, doc)
	}
}

// Object is one decoded manifest: its type, identity and the typed value (a pointer to a
// k8s.io/api struct, or to ScaledObject).
type Object struct {
	Kind      string
	Name      string
	Namespace string
	Value     any
}

// kinds lists every apiVersion/kind the manifests may contain, with the Go type it decodes into.
// Anything else is an error: a new kind must be added here (and so gets strict checking).
func kinds() map[string]func() any {
	return map[string]func() any{
		"v1/Namespace":                           func() any { return &corev1.Namespace{} },
		"v1/ServiceAccount":                      func() any { return &corev1.ServiceAccount{} },
		"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
		"v1/Secret":                              func() any { return &corev1.Secret{} },
		"v1/Service":                             func() any { return &corev1.Service{} },
		"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
		"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
		"batch/v1/Job":                           func() any { return &batchv1.Job{} },
		"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
		"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
		"networking.k8s.io/v1/Ingress":           func() any { return &networkingv1.Ingress{} },
		"networking.k8s.io/v1/NetworkPolicy":     func() any { return &networkingv1.NetworkPolicy{} },
		"keda.sh/v1alpha1/ScaledObject":          func() any { return &ScaledObject{} },
		"keda.sh/v1alpha1/TriggerAuthentication": func() any { return &TriggerAuthentication{} },
	}
}

// Decode strict-decodes one YAML document into the Go type of its apiVersion and kind.
//
// It fails on duplicate keys, on fields the type does not have (compared case-sensitively, like
// the API server: encoding/json alone would accept "containerport" for "containerPort"), on
// values of the wrong type, and on an apiVersion/kind that is not in the list above.
func Decode(doc []byte) (Object, error) {
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return Object{}, fmt.Errorf("yaml: %w", err)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return Object{}, fmt.Errorf("not an object: %w", err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return Object{}, fmt.Errorf("apiVersion and kind are required")
	}
	newValue, ok := kinds()[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return Object{}, fmt.Errorf("unknown kind %s %s: add it to k8s/manifests.go", tm.APIVersion, tm.Kind)
	}
	v := newValue()
	strictErrs, err := sigsjson.UnmarshalStrict(js, v)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	if len(strictErrs) > 0 {
		return Object{}, fmt.Errorf("%s: %w", tm.Kind, errors.Join(strictErrs...))
	}
	meta, ok := v.(metav1.Object)
	if !ok {
		return Object{}, fmt.Errorf("%s has no metadata", tm.Kind)
	}
	if meta.GetName() == "" {
		return Object{}, fmt.Errorf("%s without metadata.name", tm.Kind)
	}
	return Object{Kind: tm.Kind, Name: meta.GetName(), Namespace: meta.GetNamespace(), Value: v}, nil
}

// DecodeAll splits a rendered stream and decodes every document.
func DecodeAll(stream []byte) ([]Object, error) {
	docs, err := SplitDocuments(stream)
	if err != nil {
		return nil, err
	}
	objs := make([]Object, 0, len(docs))
	var errs []error
	for i, doc := range docs {
		o, err := Decode(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		objs = append(objs, o)
	}
	return objs, errors.Join(errs...)
}

// ScaledObject is the part of KEDA's keda.sh/v1alpha1 ScaledObject
// (github.com/kedacore/keda apis/keda/v1alpha1/scaledobject_types.go) that these manifests use,
// with KEDA's JSON field names. KEDA's module is not imported: it drags in most of the
// cloud SDKs. A field used in a manifest but missing here fails the strict decode: add it with
// KEDA's exact name and type.
type ScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              ScaledObjectSpec `json:"spec"`
}

// ScaledObjectSpec is KEDA's ScaledObjectSpec (subset).
type ScaledObjectSpec struct {
	ScaleTargetRef   *ScaleTarget    `json:"scaleTargetRef"`
	PollingInterval  *int32          `json:"pollingInterval,omitempty"`
	CooldownPeriod   *int32          `json:"cooldownPeriod,omitempty"`
	IdleReplicaCount *int32          `json:"idleReplicaCount,omitempty"`
	MinReplicaCount  *int32          `json:"minReplicaCount,omitempty"`
	MaxReplicaCount  *int32          `json:"maxReplicaCount,omitempty"`
	Advanced         *AdvancedConfig `json:"advanced,omitempty"`
	Triggers         []ScaleTrigger  `json:"triggers"`
	Fallback         *Fallback       `json:"fallback,omitempty"`
}

// ScaleTarget names the workload KEDA scales.
type ScaleTarget struct {
	Name                   string `json:"name"`
	APIVersion             string `json:"apiVersion,omitempty"`
	Kind                   string `json:"kind,omitempty"`
	EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
}

// AdvancedConfig is KEDA's advanced section (subset).
type AdvancedConfig struct {
	HorizontalPodAutoscalerConfig *HorizontalPodAutoscalerConfig `json:"horizontalPodAutoscalerConfig,omitempty"`
	RestoreToOriginalReplicaCount bool                           `json:"restoreToOriginalReplicaCount,omitempty"`
}

// HorizontalPodAutoscalerConfig tunes the HPA that KEDA creates and owns.
type HorizontalPodAutoscalerConfig struct {
	Name     string                                         `json:"name,omitempty"`
	Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
}

// ScaleTrigger is one KEDA trigger; Metadata is scaler-specific (all values are strings).
type ScaleTrigger struct {
	Type              string                         `json:"type"`
	Name              string                         `json:"name,omitempty"`
	UseCachedMetrics  bool                           `json:"useCachedMetrics,omitempty"`
	Metadata          map[string]string              `json:"metadata"`
	AuthenticationRef *AuthenticationRef             `json:"authenticationRef,omitempty"`
	MetricType        autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
}

// AuthenticationRef points at a (Cluster)TriggerAuthentication.
type AuthenticationRef struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
}

// TriggerAuthentication is the part of KEDA's keda.sh/v1alpha1 TriggerAuthentication
// (apis/keda/v1alpha1/triggerauthentication_types.go) these manifests use: scaler parameters
// taken from Secrets.
type TriggerAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              TriggerAuthenticationSpec `json:"spec"`
}

// TriggerAuthenticationSpec is KEDA's TriggerAuthenticationSpec (subset).
type TriggerAuthenticationSpec struct {
	SecretTargetRef []AuthSecretTargetRef `json:"secretTargetRef,omitempty"`
}

// AuthSecretTargetRef gives a scaler parameter the value of a key of a Secret.
type AuthSecretTargetRef struct {
	Parameter string `json:"parameter"`
	Name      string `json:"name"`
	Key       string `json:"key"`
}

// Fallback is the replica count KEDA keeps while a scaler keeps failing.
type Fallback struct {
	FailureThreshold int32 `json:"failureThreshold"`
	Replicas         int32 `json:"replicas"`
}
