package lab

import "testing"

func TestCRILogText(t *testing.T) {
	log := "2026-11-29T17:00:00.1Z stdout F device /dev/nvidia0 char 195:0\n" +
		"2026-11-29T17:00:00.2Z stdout P env NVIDIA_VISIBLE_DEVICES=GPU-\n" +
		"2026-11-29T17:00:00.3Z stdout F 1234\n" +
		"2026-11-29T17:00:00.4Z stderr F text with  two spaces\n"
	want := "device /dev/nvidia0 char 195:0\nenv NVIDIA_VISIBLE_DEVICES=GPU-1234\ntext with  two spaces\n"
	if got := criLogText(log); got != want {
		t.Errorf("criLogText:\n got %q\nwant %q", got, want)
	}
}

func TestMountinfoFields(t *testing.T) {
	line := `36 25 0:32 / /work/.lab/nodes/n1/with\040space rw,relatime shared:1 - overlay overlay rw`
	mp, fstype := mountinfoFields(line)
	if mp != "/work/.lab/nodes/n1/with space" || fstype != "overlay" {
		t.Errorf("mountinfoFields = %q, %q", mp, fstype)
	}
}
