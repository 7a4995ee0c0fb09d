package locality

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

func TestParseAnnotation(t *testing.T) {
	cases := []struct {
		name, value string
		want        []Dataset
		wantErr     string
	}{
		{name: "a bare name is in the pod's namespace", value: "imagenet", want: []Dataset{{"team", "imagenet"}}},
		{name: "namespace and name, spaces ignored, duplicates once", value: "data/coco, imagenet ,data/coco",
			want: []Dataset{{"data", "coco"}, {"team", "imagenet"}}},
		{name: "an empty entry is refused", value: "coco,,x", wantErr: `entry 2 "": empty`},
		{name: "too many slashes", value: "a/b/c", wantErr: `entry 1 "a/b/c": name "b/c"`},
		{name: "a bad namespace", value: "Team/coco", wantErr: `namespace "Team"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseAnnotation(c.value, "team")
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !strings.Contains(err.Error(), api.AnnotationDatasets) ||
					!strings.Contains(err.Error(), "<namespace>/<name> or <name>") {
					t.Fatalf("error %v, want one naming the annotation, the accepted form and %q", err, c.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestLabelKeys(t *testing.T) {
	short := Dataset{"team", "imagenet"}
	if got := LabelKey(short); got != "dataset.gpudra.dev/team.imagenet" {
		t.Errorf("LabelKey(%v) = %s", short, got)
	}
	if got, ok := FluidKey(short); !ok || got != "fluid.io/s-team-imagenet" {
		t.Errorf("FluidKey(%v) = %s, %v", short, got, ok)
	}
	long := Dataset{"team", strings.Repeat("d", 60)}
	got := LabelKey(long)
	if !strings.HasPrefix(got, "dataset.gpudra.dev/sha256-") || len(validation.IsQualifiedName(got)) > 0 {
		t.Errorf("LabelKey of a long name = %s, want a valid sha256- label", got)
	}
	if other := LabelKey(Dataset{"team", strings.Repeat("d", 61)}); other == got {
		t.Errorf("two long names share label %s", got)
	}
	if _, ok := FluidKey(long); ok {
		t.Error("FluidKey of a name past 63 characters is said to fit; Fluid uses the dataset's UID then")
	}
}

type volumes struct {
	claims  map[string]*corev1.PersistentVolumeClaim
	volumes map[string]*corev1.PersistentVolume
}

func (v volumes) Claim(ns, name string) (*corev1.PersistentVolumeClaim, error) {
	return v.claims[ns+"/"+name], nil
}
func (v volumes) Volume(name string) (*corev1.PersistentVolume, error) { return v.volumes[name], nil }

func fluidPV(name string, labels map[string]string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: FluidStorageClass, PersistentVolumeSource: corev1.PersistentVolumeSource{
			CSI: &corev1.CSIPersistentVolumeSource{Driver: FluidCSIDriver, VolumeHandle: name},
		}},
	}
}

func claim(ns, name, volume string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume}}
}

func mounts(claims ...string) *corev1.PodSpec {
	s := &corev1.PodSpec{}
	for _, c := range claims {
		s.Volumes = append(s.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}})
	}
	return s
}

func TestNeeds(t *testing.T) {
	vols := volumes{
		claims: map[string]*corev1.PersistentVolumeClaim{
			"team/imagenet": claim("team", "imagenet", "team-imagenet"),
			"team/long":     claim("team", "long", "team-long"),
			"team/scratch":  claim("team", "scratch", "pv-nfs"),
			"team/pending":  claim("team", "pending", ""),
		},
		volumes: map[string]*corev1.PersistentVolume{
			"team-imagenet": fluidPV("team-imagenet", map[string]string{"fluid.io/s-team-imagenet": "true", "other": "x"}),
			"team-long":     fluidPV("team-long", map[string]string{"fluid.io/s-6f1c0d2e": "true"}),
			"pv-nfs":        {ObjectMeta: metav1.ObjectMeta{Name: "pv-nfs", Labels: map[string]string{"fluid.io/s-x": "true"}}},
		},
	}
	cases := []struct {
		name        string
		annotations map[string]string
		spec        *corev1.PodSpec
		vols        Volumes
		want        []Need
	}{
		{name: "a Fluid volume's dataset is cached where the volume's label is", spec: mounts("imagenet"), vols: vols,
			want: []Need{{Dataset{"team", "imagenet"}, []string{"dataset.gpudra.dev/team.imagenet", "fluid.io/s-team-imagenet"}}}},
		{name: "Fluid's UID label is taken from the volume", spec: mounts("long"), vols: vols,
			want: []Need{{Dataset{"team", "long"}, []string{"dataset.gpudra.dev/team.long", "fluid.io/s-6f1c0d2e"}}}},
		{name: "other volumes, unbound and missing claims name no dataset", spec: mounts("scratch", "pending", "gone"), vols: vols},
		{name: "without Fluid, the annotation names datasets", annotations: map[string]string{api.AnnotationDatasets: "data/coco"}, spec: mounts("imagenet"),
			want: []Need{{Dataset{"data", "coco"}, []string{"dataset.gpudra.dev/data.coco", "fluid.io/s-data-coco"}}}},
		{name: "a dataset named twice is one need", annotations: map[string]string{api.AnnotationDatasets: "imagenet"}, spec: mounts("imagenet"), vols: vols,
			want: []Need{{Dataset{"team", "imagenet"}, []string{"dataset.gpudra.dev/team.imagenet", "fluid.io/s-team-imagenet"}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Needs("team", c.annotations, c.spec, c.vols)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got, c.want, func(a, b Need) bool { return a.Dataset == b.Dataset && slices.Equal(a.Keys, b.Keys) }) {
				t.Fatalf("got %v, want %v", got, c.want)
			}
		})
	}
	if _, err := Needs("team", map[string]string{api.AnnotationDatasets: "a//b"}, nil, nil); err == nil {
		t.Error("a bad annotation is accepted")
	}
}

func TestScoreAndPreferred(t *testing.T) {
	needs := []Need{
		{Dataset{"team", "a"}, []string{"dataset.gpudra.dev/team.a", "fluid.io/s-team-a"}},
		{Dataset{"team", "b"}, []string{"dataset.gpudra.dev/team.b"}},
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   int64
	}{
		{"no cache", nil, 0},
		{"one of two by Fluid's label", map[string]string{"fluid.io/s-team-a": "true"}, 50},
		{"both, gpudra's labels", map[string]string{"dataset.gpudra.dev/team.a": "cached", "dataset.gpudra.dev/team.b": "cached"}, 100},
		{"false is not cached", map[string]string{"dataset.gpudra.dev/team.b": "false"}, 0},
	} {
		if got := Score(c.labels, needs, 100); got != c.want {
			t.Errorf("%s: score %d, want %d", c.name, got, c.want)
		}
	}
	spec := &corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "fluid.io/s-team-a", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}}}},
	}}}
	got := WithoutPreferred(spec, needs)
	if len(got) != 1 || got[0].Dataset.Name != "b" {
		t.Errorf("WithoutPreferred kept %v, want only team/b (Fluid's affinity already prefers team/a)", got)
	}
	if len(needs) != 2 {
		t.Error("WithoutPreferred changed its input")
	}
}

// TestMergeUnionsEachDatasetsKeys: two pod sets reading one dataset through different cache
// labels (a named dataset and a Fluid volume keyed by the dataset's UID) need it once, cached
// on nodes with either label; the input is not changed.
func TestMergeUnionsEachDatasetsKeys(t *testing.T) {
	d, other := Dataset{Namespace: "ml", Name: "imagenet"}, Dataset{Namespace: "ml", Name: "coco"}
	first := []Need{{Dataset: d, Keys: []string{"dataset.gpudra.dev/ml.imagenet"}}}
	second := []Need{{Dataset: d, Keys: []string{"fluid.io/s-ml-3f2a", "dataset.gpudra.dev/ml.imagenet"}}, {Dataset: other, Keys: []string{"dataset.gpudra.dev/ml.coco"}}}
	got := Merge(Merge(nil, first...), second...)
	want := []Need{
		{Dataset: d, Keys: []string{"dataset.gpudra.dev/ml.imagenet", "fluid.io/s-ml-3f2a"}},
		{Dataset: other, Keys: []string{"dataset.gpudra.dev/ml.coco"}},
	}
	if !slices.EqualFunc(got, want, func(a, b Need) bool { return a.Dataset == b.Dataset && slices.Equal(a.Keys, b.Keys) }) {
		t.Errorf("Merge = %v, want %v", got, want)
	}
	if len(first[0].Keys) != 1 {
		t.Errorf("Merge changed its input: %v", first)
	}
}
