package webview

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	api "github.com/gpudra/gpudra/api/gpu.gpudra.dev/v1alpha1"
)

// Page sizes of the cluster and queues pages' lists.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Listing is what a list page was asked for: filters (query parameters namespace, node,
// model, vendor, queue; a node or model matches when it contains the text, a vendor is one
// of vendors) and one page of limit items (?page=, from 1; ?limit=). Pages is how many
// pages the longest list has.
type Listing struct {
	Namespace string `json:"namespace,omitempty"`
	Node      string `json:"node,omitempty"`
	Model     string `json:"model,omitempty"`
	Vendor    string `json:"vendor,omitempty"`
	Queue     string `json:"queue,omitempty"`
	Limit     int    `json:"limit"`
	Page      int    `json:"page"`
	Pages     int    `json:"pages"`
}

// vendors are the accepted values of the vendor filter.
var vendors = []string{api.VendorNVIDIA, api.VendorAMD, api.VendorHygon}

// parseListing reads a list page's query, refusing a limit or page that is not a whole
// number in range and a vendor that is not one of vendors (in any case).
func parseListing(r *http.Request) (Listing, error) {
	q := r.URL.Query()
	l := Listing{Namespace: q.Get("namespace"), Node: q.Get("node"), Model: q.Get("model"), Queue: q.Get("queue"), Limit: DefaultLimit, Page: 1}
	if v := q.Get("vendor"); v != "" {
		l.Vendor = strings.ToLower(v)
		if !slices.Contains(vendors, l.Vendor) {
			l.Vendor = ""
			return l, fmt.Errorf("vendor %q: accepted values are %s", v, strings.Join(vendors, ", "))
		}
	}
	num := func(name string, lo, hi int, into *int) error {
		v := q.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return fmt.Errorf("%s %q: want a whole number from %d to %d", name, v, lo, hi)
		}
		*into = n
		return nil
	}
	if err := num("limit", 1, MaxLimit, &l.Limit); err != nil {
		return l, err
	}
	if err := num("page", 1, 1<<30, &l.Page); err != nil {
		return l, err
	}
	return l, nil
}

// Filtered is whether any filter is set.
func (l Listing) Filtered() bool {
	return l.Namespace != "" || l.Node != "" || l.Model != "" || l.Vendor != "" || l.Queue != ""
}

// matches reports whether value contains the filter text (an empty filter matches all).
func matches(filter, value string) bool { return filter == "" || strings.Contains(value, filter) }

// paginate is the listing's page of items, noting how many pages the items take.
func paginate[T any](l *Listing, items []T) []T {
	pages := max(1, (len(items)+l.Limit-1)/l.Limit)
	l.Pages = max(l.Pages, pages)
	start := min(len(items), (l.Page-1)*l.Limit)
	return items[start:min(len(items), start+l.Limit)]
}

// Query is the query string of the listing's page n, with its filters.
func (l Listing) Query(n int) string {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": l.Namespace, "node": l.Node, "model": l.Model, "vendor": l.Vendor, "queue": l.Queue} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if l.Limit != DefaultLimit {
		q.Set("limit", strconv.Itoa(l.Limit))
	}
	if n > 1 {
		q.Set("page", strconv.Itoa(n))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// Prev and Next are the neighbouring pages, 0 when there is none.
func (l Listing) Prev() int {
	if l.Page > 1 {
		return l.Page - 1
	}
	return 0
}

func (l Listing) Next() int {
	if l.Page < l.Pages {
		return l.Page + 1
	}
	return 0
}
