// Package mutation has what gpudra's mutating admission handlers share: reading the object
// a Create request admits, and answering with a JSON patch to the changed object.
package mutation
