"""DDI open-ended lesion diagnosis and candidate-label classification (SkinGPT-R1 evaluation settings).

``cases`` loads images and references, ``images`` validates image files, ``tasks`` builds the prompts and maps
classification answers to labels, ``plan`` runs the model and judge stages through the batch runner, ``batch``
launches them, ``summary`` scores a run and ``interactive`` serves the lesion page.
"""
