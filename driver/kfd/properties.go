package kfd

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Properties are the "key value" lines of a KFD properties file (a topology node's, a
// memory bank's or a link's). Every value the kernel prints there is an unsigned integer;
// hive_id and unique_id use all 64 bits.
type Properties map[string]uint64

// maxPropertiesBytes bounds what is read of one properties file (the kernel's are under
// 2 KiB).
const maxPropertiesBytes = 64 << 10

// ParseProperties reads a properties file's text. file names it in errors, which say the
// line and the bad value.
func ParseProperties(file string, data []byte) (Properties, error) {
	if len(data) > maxPropertiesBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than a KFD properties file has (%d)", file, len(data), maxPropertiesBytes)
	}
	p := Properties{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxPropertiesBytes)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s line %d: %q is not \"<key> <value>\"", file, n, line)
		}
		v, err := strconv.ParseUint(fields[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %s %q is not an unsigned decimal integer", file, n, fields[0], fields[1])
		}
		if _, dup := p[fields[0]]; dup {
			return nil, fmt.Errorf("%s line %d: %s appears twice", file, n, fields[0])
		}
		p[fields[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// need returns key's value, or an error naming the file and the missing key.
func (p Properties) need(file, key string) (uint64, error) {
	v, ok := p[key]
	if !ok {
		return 0, fmt.Errorf("%s: no %s", file, key)
	}
	return v, nil
}

// GFXTarget names a gfx_target_version the way ROCm names ISAs: major, then minor and
// stepping as one hex digit each (90402 is gfx942, 90010 gfx90a, 110501 gfx1151). ok is
// false for 0 (a CPU node) and for versions whose minor or stepping exceed one hex digit.
func GFXTarget(version uint64) (string, bool) {
	major, minor, step := version/10000, version/100%100, version%100
	if major == 0 || minor > 15 || step > 15 {
		return "", false
	}
	return fmt.Sprintf("gfx%d%x%x", major, minor, step), true
}
