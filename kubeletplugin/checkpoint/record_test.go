package checkpoint

import (
	"reflect"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpudra/gpudra/kubeletplugin/prepared"
)

// TestClaimRecordKeepsEveryField: a claim whose every field is set comes back from its
// record whole, so that no field of the in-memory types is left out of the files.
func TestClaimRecordKeepsEveryField(t *testing.T) {
	var pc prepared.Claim
	n := 0
	fillAll(reflect.ValueOf(&pc).Elem(), &n)
	raw, err := MarshalClaim(&pc)
	if err != nil {
		t.Fatal(err)
	}
	for _, strict := range []bool{true, false} {
		got, err := UnmarshalClaim(raw, strict)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*got, pc) {
			t.Errorf("claim read back from its record (strict %v):\n%+v\nwant\n%+v\nrecord %s", strict, *got, pc, raw)
		}
	}
	d := &Data{BootID: "boot", Generation: 7, Claims: map[types.UID]*prepared.Claim{pc.UID: &pc}}
	if got := checkpointRecordOf(d).data(); !reflect.DeepEqual(got, d) {
		t.Errorf("checkpoint read back from its record:\n%+v\nwant\n%+v", got, d)
	}
}

// fillAll sets every field, element and pointee reachable from v to a value of its own.
func fillAll(v reflect.Value, n *int) {
	*n++
	switch v.Kind() {
	case reflect.String:
		v.SetString("v" + strconv.Itoa(*n))
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n))
	case reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillAll(v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for k := range 2 {
			fillAll(v.Index(k), n)
		}
	case reflect.Struct:
		for k := range v.NumField() {
			fillAll(v.Field(k), n)
		}
	default:
		panic("fillAll: " + v.Type().String())
	}
}
