// Package yamldoc checks that a YAML input is one document. sigs.k8s.io/yaml and the YAML
// decoders keep the first document of a stream and drop the rest without a word, so a file
// that is meant to be one object is checked before it is decoded.
package yamldoc

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Count is the number of documents in data that hold more than comments and separators.
func Count(data []byte) (int, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	n := 0
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("not valid YAML: %w", err)
		}
		if !empty(doc) {
			n++
		}
	}
}

// One refuses data of more than one document; what names the input in the error ("a
// profile", "the topology file").
func One(data []byte, what string) error {
	n, err := Count(data)
	if err != nil {
		return err
	}
	if n > 1 {
		return fmt.Errorf("%d YAML documents: a second one follows a --- separator, and %s is one YAML document", n, what)
	}
	return nil
}

func empty(doc []byte) bool {
	for _, line := range bytes.Split(doc, []byte("\n")) {
		l := bytes.TrimSpace(line)
		if len(l) > 0 && l[0] != '#' && !bytes.Equal(l, []byte("---")) {
			return false
		}
	}
	return true
}

// Empty says whether one document holds nothing but comments and separators.
func Empty(doc []byte) bool { return empty(doc) }
