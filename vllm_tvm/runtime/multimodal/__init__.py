"""Multimodal input: images from OpenAI content parts decoded safely into RGB pixels, and the
image processors of the vision models turning those pixels into the encoder's input, equal
to transformers' processors but with Pillow and numpy only (a serving box has no torch).
"""
