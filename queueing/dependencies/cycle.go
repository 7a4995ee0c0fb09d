package dependencies

import "strings"

// Cycle is the path, "a → b → a", by which a new job name that runs after deps would
// depend on itself, given what each existing job runs after (edges, by job name); empty
// when there is none. Only Jobs run after others, so only Job dependencies are followed.
func Cycle(name string, deps []Dependency, edges map[string][]Dependency) string {
	visited := map[string]bool{}
	var walk func(path []string, d Dependency) []string
	walk = func(path []string, d Dependency) []string {
		if d.Kind != KindJob {
			return nil
		}
		path = append(path, d.Name)
		if d.Name == name {
			return path
		}
		if visited[d.Name] {
			return nil
		}
		visited[d.Name] = true
		for _, next := range edges[d.Name] {
			if found := walk(path, next); found != nil {
				return found
			}
		}
		return nil
	}
	for _, d := range deps {
		if found := walk([]string{name}, d); found != nil {
			return strings.Join(found, " → ")
		}
	}
	return ""
}
