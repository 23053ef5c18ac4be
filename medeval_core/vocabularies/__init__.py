"""Medical vocabularies more than one benchmark maps names into (ICD-9-CM), with the file the install builds."""
