package largefirst

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Band gives the jobs asking for at least MinGPUs GPUs the WorkloadPriorityClass
// PriorityClass.
type Band struct {
	MinGPUs       int
	PriorityClass string
}

// Bands are the bands of a policy, by ascending MinGPUs.
type Bands []Band

// bandForm is the accepted form of a list of bands, for error messages.
const bandForm = "comma-separated minGPUs:priorityClass pairs by ascending minGPUs, minGPUs a whole number of at least 1 and priorityClass a WorkloadPriorityClass name, e.g. 16:gpudra-large,64:gpudra-huge"

// ParseBands reads bands written minGPUs:priorityClass, comma-separated, and refuses a
// list that is empty, not ascending by minGPUs, or names a class twice; flag names the
// setting in errors.
func ParseBands(flag, value string) (Bands, error) {
	if strings.TrimSpace(value) == "" {
		return nil, fmt.Errorf("%s is empty: want %s", flag, bandForm)
	}
	var out Bands
	for _, entry := range strings.Split(value, ",") {
		min, class, ok := strings.Cut(strings.TrimSpace(entry), ":")
		if !ok {
			return nil, fmt.Errorf("%s: entry %q has no ':': want %s", flag, entry, bandForm)
		}
		n, err := strconv.Atoi(strings.TrimSpace(min))
		if err != nil {
			return nil, fmt.Errorf("%s: entry %q: minGPUs %q is not a whole number: want %s", flag, entry, min, bandForm)
		}
		out = append(out, Band{MinGPUs: n, PriorityClass: strings.TrimSpace(class)})
	}
	if err := out.Validate(flag); err != nil {
		return nil, err
	}
	return out, nil
}

// Validate refuses bands that are empty, whose minGPUs are not at least 1 and strictly
// ascending, or whose classes are not object names or are named twice.
func (b Bands) Validate(flag string) error {
	if len(b) == 0 {
		return fmt.Errorf("%s is empty: want %s", flag, bandForm)
	}
	for k, band := range b {
		if band.MinGPUs < 1 {
			return fmt.Errorf("%s: band %d (%d:%s): minGPUs must be at least 1: want %s", flag, k, band.MinGPUs, band.PriorityClass, bandForm)
		}
		if k > 0 && band.MinGPUs <= b[k-1].MinGPUs {
			return fmt.Errorf("%s: band %d (%d:%s): minGPUs must be above the band before's %d: want %s", flag, k, band.MinGPUs, band.PriorityClass, b[k-1].MinGPUs, bandForm)
		}
		if errs := validation.IsDNS1123Subdomain(band.PriorityClass); len(errs) > 0 {
			return fmt.Errorf("%s: band %d (%d:%q): priorityClass is not a WorkloadPriorityClass name: %s", flag, k, band.MinGPUs, band.PriorityClass, strings.Join(errs, "; "))
		}
		if slices.ContainsFunc(b[:k], func(o Band) bool { return o.PriorityClass == band.PriorityClass }) {
			return fmt.Errorf("%s: band %d: priorityClass %s is named twice: each band has a class of its own", flag, k, band.PriorityClass)
		}
	}
	return nil
}

// For is the band of a job asking for percent hundredths of a GPU: the last band whose
// minGPUs it reaches; ok is false below the first band.
func (b Bands) For(percent int64) (band Band, ok bool) {
	for _, x := range b {
		if percent >= int64(x.MinGPUs)*100 {
			band, ok = x, true
		}
	}
	return band, ok
}

// Top is the band of the largest jobs, the one waiting jobs are lifted to.
func (b Bands) Top() Band { return b[len(b)-1] }

// Has reports whether class is one of the bands' classes.
func (b Bands) Has(class string) bool {
	return slices.ContainsFunc(b, func(x Band) bool { return x.PriorityClass == class })
}

// String writes the bands in the form ParseBands reads.
func (b Bands) String() string {
	parts := make([]string, len(b))
	for k, x := range b {
		parts[k] = strconv.Itoa(x.MinGPUs) + ":" + x.PriorityClass
	}
	return strings.Join(parts, ",")
}
