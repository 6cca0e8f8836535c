package devcluster

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// envResolver computes a container's environment the way the kubelet does: envFrom
// first, then env in order, with $(VAR) references expanded against what came before.
type envResolver struct {
	client kubernetes.Interface
	log    logr.Logger
}

// resolve returns the container's environment as ordered NAME=value pairs and the
// container's args with $(VAR) references expanded. podIP is the address the Pod will
// report; fieldRefs to status.podIP resolve to it.
func (r envResolver) resolve(ctx context.Context, pod *corev1.Pod, c *corev1.Container, podIP, hostIP string) (env, args []string, err error) {
	values := map[string]string{}
	var order []string
	set := func(name, value string) {
		if _, seen := values[name]; !seen {
			order = append(order, name)
		}
		values[name] = value
	}

	for _, from := range c.EnvFrom {
		data, err := r.envFromData(ctx, pod.Namespace, from)
		if err != nil {
			return nil, nil, fmt.Errorf("envFrom %w", err)
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}

	for _, e := range c.Env {
		if e.ValueFrom == nil {
			set(e.Name, expandVars(e.Value, values))
			continue
		}
		value, ok, err := r.valueFrom(ctx, pod, c, e, podIP, hostIP)
		if err != nil {
			return nil, nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if ok {
			set(e.Name, value)
		}
	}

	env = make([]string, 0, len(order))
	for _, name := range order {
		env = append(env, name+"="+values[name])
	}
	for _, a := range c.Args {
		args = append(args, expandVars(a, values))
	}
	return env, args, nil
}

// envFromData is what one envFrom source adds, by key: nothing when it is absent and
// optional.
func (r envResolver) envFromData(ctx context.Context, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		ref := from.ConfigMapRef
		cm, found, err := getOptional(ctx, r.client.CoreV1().ConfigMaps(ns).Get, "configMap", ref.Name, ref.Optional)
		if !found {
			return nil, err
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		ref := from.SecretRef
		s, found, err := getOptional(ctx, r.client.CoreV1().Secrets(ns).Get, "secret", ref.Name, ref.Optional)
		if !found {
			return nil, err
		}
		data := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			data[k] = string(v)
		}
		return data, nil
	default:
		return nil, nil
	}
}

// valueFrom resolves one env source; ok is false when an optional source is absent or
// the source is not supported here.
func (r envResolver) valueFrom(ctx context.Context, pod *corev1.Pod, c *corev1.Container, e corev1.EnvVar, podIP, hostIP string) (string, bool, error) {
	src := e.ValueFrom
	switch {
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		return keyValue(ctx, r.client.CoreV1().Secrets(pod.Namespace).Get, "secret", ref.Name, ref.Key, ref.Optional,
			func(s *corev1.Secret) (string, bool) {
				v, ok := s.Data[ref.Key]
				return string(v), ok
			})
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		return keyValue(ctx, r.client.CoreV1().ConfigMaps(pod.Namespace).Get, "configMap", ref.Name, ref.Key, ref.Optional,
			func(cm *corev1.ConfigMap) (string, bool) {
				if v, ok := cm.Data[ref.Key]; ok {
					return v, true
				}
				v, ok := cm.BinaryData[ref.Key]
				return string(v), ok
			})
	case src.FieldRef != nil:
		v, err := podField(pod, src.FieldRef.FieldPath, podIP, hostIP)
		if err != nil {
			return "", false, err
		}
		return v, true, nil
	case src.ResourceFieldRef != nil:
		v, err := ResourceField(&pod.Spec, c, src.ResourceFieldRef)
		if err != nil {
			return "", false, err
		}
		return v, true, nil
	default:
		r.log.Info("unsupported env source; the variable is left unset", "pod", pod.Namespace+"/"+pod.Name, "env", e.Name)
		return "", false, nil
	}
}

// ResourceField implements the downward API's resourceFieldRef as the kubelet does, for
// container c of pod: the named container's (c when unnamed) request or limit, divided
// by the divisor (1 when unset) and rounded up. An unset limit is this machine's: its
// CPUs, or its memory. An unset request is 0.
func ResourceField(pod *corev1.PodSpec, c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		i := slices.IndexFunc(pod.Containers, func(o corev1.Container) bool { return o.Name == ref.ContainerName })
		if i < 0 {
			return "", fmt.Errorf("resourceFieldRef: no container %q", ref.ContainerName)
		}
		c = &pod.Containers[i]
	}
	kind, name, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "requests" && kind != "limits") {
		return "", fmt.Errorf("resourceFieldRef: unsupported resource %q", ref.Resource)
	}
	list := c.Resources.Requests
	if kind == "limits" {
		list = c.Resources.Limits
	}
	q, set := list[corev1.ResourceName(name)]
	if !set && kind == "limits" {
		switch corev1.ResourceName(name) {
		case corev1.ResourceCPU:
			q = *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI)
		case corev1.ResourceMemory:
			q = *resource.NewQuantity(machineMemory(), resource.BinarySI)
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if corev1.ResourceName(name) == corev1.ResourceCPU {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

// machineMemory is the machine's memory in bytes (MemTotal), 0 when unreadable.
func machineMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// podField implements the downward API's fieldRef paths.
func podField(pod *corev1.Pod, path, podIP, hostIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	}
	for prefix, m := range map[string]map[string]string{
		"metadata.labels": pod.Labels, "metadata.annotations": pod.Annotations,
	} {
		if path == prefix {
			return formatMap(m), nil
		}
		if key, ok := strings.CutPrefix(path, prefix+"['"); ok {
			if key, ok = strings.CutSuffix(key, "']"); ok {
				return m[key], nil
			}
		}
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// formatMap renders labels or annotations like the downward API volume does.
func formatMap(m map[string]string) string {
	lines := make([]string, 0, len(m))
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("%s=%q", k, v))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func isOptional(b *bool) bool { return b != nil && *b }

// getOptional gets the ConfigMap or Secret (kind) name with get, as the kubelet reads an
// env source: found is false, with no error, when it does not exist and optional allows
// that; any other error names the object.
func getOptional[T any](ctx context.Context, get func(context.Context, string, metav1.GetOptions) (T, error), kind, name string, optional *bool) (obj T, found bool, err error) {
	obj, err = get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		return obj, true, nil
	case apierrors.IsNotFound(err) && isOptional(optional):
		return obj, false, nil
	default:
		return obj, false, fmt.Errorf("%s %q: %w", kind, name, err)
	}
}

// keyValue is valueFrom's answer for key of the ConfigMap or Secret (kind) name, read
// with get (getOptional) and looked up with value. The variable is left unset when an
// optional object or key is absent; a missing key of a required reference is an error.
func keyValue[T any](ctx context.Context, get func(context.Context, string, metav1.GetOptions) (T, error),
	kind, name, key string, optional *bool, value func(T) (string, bool)) (string, bool, error) {
	obj, found, err := getOptional(ctx, get, kind, name, optional)
	if err != nil || !found {
		return "", false, err
	}
	if v, ok := value(obj); ok {
		return v, true, nil
	}
	if isOptional(optional) {
		return "", false, nil
	}
	return "", false, fmt.Errorf("%s %q has no key %q", kind, name, key)
}

// expandVars replaces $(NAME) with the value of NAME when it is defined and leaves it
// as written otherwise; $$ escapes a dollar sign. These are the kubelet's rules.
func expandVars(s string, values map[string]string) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := values[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}
