package lab

import "testing"

// Manifests written as documents that start with "---" (an empty first document), with
// empty documents between objects, decode to their objects, whole numbers as int64.
func TestDecodeManifestsSkipsEmptyDocuments(t *testing.T) {
	objs, err := DecodeManifests([]byte(`
---
apiVersion: v1
kind: ConfigMap
metadata: {name: a}
---
---
# only a comment
---
apiVersion: batch/v1
kind: Job
metadata: {name: b}
spec: {parallelism: 4}
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetName() != "a" || objs[1].GetName() != "b" {
		t.Fatalf("decoded %d objects %v, want ConfigMap a and Job b", len(objs), objs)
	}
	if p, ok := objs[1].Object["spec"].(map[string]any)["parallelism"].(int64); !ok || p != 4 {
		t.Errorf("parallelism %#v, want int64 4", objs[1].Object["spec"])
	}
}
